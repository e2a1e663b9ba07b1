package config

import (
	"slices"
	"strings"
	"testing"
)

func TestParseRates(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []float64
		err  string // a part of the error; "" for none
	}{
		{"1000,2500,5000,10000", []float64{1000, 2500, 5000, 10000}, ""},
		{" 50 , 100 ", []float64{50, 100}, ""},
		{"0.5,1.5", []float64{0.5, 1.5}, ""},
		{"", nil, "not a list"},
		{"1000,x", nil, "not a list"},
		{"0,10", nil, "not a positive rate"},
		{"-5", nil, "not a positive rate"},
		{"NaN", nil, "not a positive rate"},
		{"+Inf", nil, "not a positive rate"},
		{"100,50", nil, "must rise"},
		{"100,100", nil, "must rise"},
	} {
		got, err := ParseRates(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseRates(%q): %v", tc.in, err)
		case tc.err == "" && !slices.Equal(got, tc.want):
			t.Errorf("ParseRates(%q) = %v, want %v", tc.in, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseRates(%q): error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
}

func TestParseModes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"nats,local,cross", []string{"nats", "local", "cross"}, ""},
		{"floor,local", []string{"floor", "local"}, ""},
		{"cross, nats", []string{"cross", "nats"}, ""},
		{"local", []string{"local"}, ""},
		{"", nil, "not a mode"},
		{"nats,redis", nil, `"redis" is not a mode`},
		{"local,local", nil, "twice"},
	} {
		got, err := ParseModes(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseModes(%q): %v", tc.in, err)
		case tc.err == "" && !slices.Equal(got, tc.want):
			t.Errorf("ParseModes(%q) = %v, want %v", tc.in, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseModes(%q): error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
}
