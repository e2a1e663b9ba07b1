package ratelimit

import (
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// redis_rate's float arithmetic reports sub-microsecond noise and a
// Remaining one short; fromRedisRate gives back the exact GCRA answer.
func TestFromRedisRate(t *testing.T) {
	l := Limit{Rate: 10, Period: time.Second, Burst: 10}
	tests := []struct {
		name string
		in   redis_rate.Result
		want Result
	}{
		{
			name: "fresh key, noise below a whole Remaining",
			in:   redis_rate.Result{Allowed: 1, Remaining: 8, RetryAfter: -1, ResetAfter: 100000024},
			want: Result{Allowed: true, Limit: l, Remaining: 9, ResetAfter: 100 * time.Millisecond},
		},
		{
			name: "noise the other way",
			in:   redis_rate.Result{Allowed: 1, Remaining: 7, RetryAfter: -1, ResetAfter: 299999990},
			want: Result{Allowed: true, Limit: l, Remaining: 7, ResetAfter: 300 * time.Millisecond},
		},
		{
			name: "time has passed",
			in:   redis_rate.Result{Allowed: 1, Remaining: 6, RetryAfter: -1, ResetAfter: 350 * time.Millisecond},
			want: Result{Allowed: true, Limit: l, Remaining: 6, ResetAfter: 350 * time.Millisecond},
		},
		{
			name: "last of the burst",
			in:   redis_rate.Result{Allowed: 1, Remaining: 0, RetryAfter: -1, ResetAfter: 999_999_976},
			want: Result{Allowed: true, Limit: l, Remaining: 0, ResetAfter: time.Second},
		},
		{
			name: "denied",
			in:   redis_rate.Result{Allowed: 0, Remaining: 0, RetryAfter: 99999970, ResetAfter: 999999970},
			want: Result{Limit: l, RetryAfter: 100 * time.Millisecond, ResetAfter: time.Second},
		},
		{
			name: "denied with under a microsecond to wait",
			in:   redis_rate.Result{Allowed: 0, Remaining: 0, RetryAfter: 300, ResetAfter: 900 * time.Millisecond},
			want: Result{Limit: l, RetryAfter: time.Microsecond, ResetAfter: 900 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fromRedisRate(&tt.in, l); got != tt.want {
				t.Errorf("\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
