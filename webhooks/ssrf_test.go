package webhooks

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestBlocked(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true, "::ffff:127.0.0.1": true,
		"10.0.0.1": true, "172.16.0.1": true, "172.31.255.255": true, "192.168.1.1": true,
		"fc00::1": true, "fd12:3456::1": true,
		"169.254.169.254": true, "fe80::1": true,
		"0.0.0.0": true, "0.1.2.3": true, "::": true,
		"224.0.0.1": true, "ff02::1": true, "255.255.255.255": true,
		"100.64.0.1": true, "100.127.255.255": true,
		"93.184.215.14": false, "8.8.8.8": false, "172.32.0.1": false, "100.128.0.1": false,
		"2606:4700:4700::1111": false,
	} {
		if got := blocked(netip.MustParseAddr(addr)) != ""; got != want {
			t.Errorf("blocked(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	strict := &Dispatcher{cfg: Config{}.withDefaults()}
	open := &Dispatcher{cfg: Config{AllowPrivate: true}.withDefaults()}
	for _, tc := range []struct {
		url     string
		strict  string // "" if allowed, else a word of the refusal
		openToo bool   // refused with AllowPrivate too
	}{
		{"https://93.184.215.14/hook", "", false},
		{"http://127.0.0.1:8080/hook", "loopback", false},
		{"http://[::1]/hook", "loopback", false},
		{"http://localhost:9/hook", "loopback", false},
		{"http://10.1.2.3/hook", "private", false},
		{"http://[fd00::1]/hook", "private", false},
		{"http://169.254.169.254/latest/meta-data", "link-local", false},
		{"http://100.64.0.7/hook", "CGNAT", false},
		{"http://0.0.0.0/hook", "unspecified", false},
		{"http://239.1.2.3/hook", "multicast", false},
		{"ftp://93.184.215.14/hook", "http:// or https://", true},
		{"file:///etc/passwd", "http:// or https://", true},
		{"https://user:pw@93.184.215.14/hook", "user name", true},
		{"https:///hook", "no host", true},
		{"::not a url", "not a valid URL", true},
	} {
		err := strict.CheckURL(ctx, tc.url)
		switch {
		case tc.strict == "" && err != nil:
			t.Errorf("CheckURL(%q) = %v, want nil", tc.url, err)
		case tc.strict != "" && (!errors.Is(err, ErrTarget) || !strings.Contains(err.Error(), tc.strict)):
			t.Errorf("CheckURL(%q) = %v, want ErrTarget saying %q", tc.url, err, tc.strict)
		}
		if tc.strict != "" && !tc.openToo && !strings.Contains(err.Error(), "--webhook-allow-private") {
			t.Errorf("CheckURL(%q) = %v: does not name the flag", tc.url, err)
		}
		err = open.CheckURL(ctx, tc.url)
		if tc.openToo != (err != nil) {
			t.Errorf("with AllowPrivate, CheckURL(%q) = %v", tc.url, err)
		}
	}
}

func TestDialControl(t *testing.T) {
	for addr, refused := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:443": true, "10.0.0.1:80": true, "[::ffff:192.168.0.1]:80": true,
		"93.184.215.14:443": false, "garbage": true,
	} {
		if err := dialControl("tcp", addr, nil); (err != nil) != refused {
			t.Errorf("dialControl(%s) = %v", addr, err)
		}
	}
}
