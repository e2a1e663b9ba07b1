package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestEvaluateBurst(t *testing.T) {
	all := BurstPhase{Client: "sdk", Registered: 100, AllS: 2, Listed: 100, ListedS: 2.5}
	for _, tc := range []struct {
		name string
		sdk  BurstPhase
		want string
	}{
		{"every node registered and listed", all, Pass},
		{"one missing", BurstPhase{Client: "sdk", Registered: 99, Listed: 99, Stalled: "only 99 of 100"}, Fail},
		{"registered but not listed", BurstPhase{Client: "sdk", Registered: 100, AllS: 2, Listed: 98}, Fail},
		{"the instance did not answer", BurstPhase{Client: "sdk", Registered: 100, AllS: 2, Listed: -1}, Fail},
	} {
		cs := EvaluateBurst(&BurstReport{Nodes: 100, SDK: tc.sdk})
		if len(cs) != 1 || cs[0].Status != tc.want || cs[0].Name != CritBurstSDK {
			t.Errorf("%s: %+v, want %s", tc.name, cs, tc.want)
		}
	}
	r := &Report{Profile: "burst", Burst: &BurstReport{Nodes: 100, SDK: all,
		Naive: BurstPhase{Client: "naive", Registered: 40, Attempts: 5000, Sheds: 4900, WindowS: 10,
			Rejections: map[string]float64{"busy": 4900}}}}
	var b bytes.Buffer
	r.WriteText(&b)
	for _, want := range []string{"sdk    100", "naive    100", "4900", "5000", "busy 4900", "criteria (the burst's bar)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the text has no %q:\n%s", want, b.String())
		}
	}
}
