package cluster

import (
	"maps"
	"testing"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_publish:calls=783,usec=7458,usec_per_call=9.52,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=16,usec=2918,usec_per_call=182.38,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=4,usec=3,usec_per_call=0.75\r\n" +
		"cmdstat_broken:usec=3\r\n" +
		"cmdstat_bad:calls=x,usec=3\r\n" +
		"used_memory:1\r\n"
	want := map[string]int64{"publish": 783, "eval": 16, "client|setinfo": 4}
	if got := ParseCommandStats(info); !maps.Equal(got, want) {
		t.Errorf("ParseCommandStats = %v, want %v", got, want)
	}
}
