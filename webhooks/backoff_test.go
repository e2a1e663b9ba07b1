package webhooks

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second},
		{12, 2048 * time.Second}, {13, time.Hour}, {30, time.Hour}, {1000, time.Hour},
	} {
		if got := Backoff(tc.attempt, time.Second, time.Hour); got != tc.want {
			t.Errorf("Backoff(%d) = %s, want %s", tc.attempt, got, tc.want)
		}
	}
	if got := Backoff(3, 10*time.Millisecond, 25*time.Millisecond); got != 25*time.Millisecond {
		t.Errorf("a cap between two doublings: got %s", got)
	}
}

// Over 24 h from the first attempt, the schedule makes a few dozen
// attempts, not thousands: the first ~13 climb to the cap, then hourly.
func TestBackoffScheduleOverADay(t *testing.T) {
	var total time.Duration
	n := 0
	for total <= 24*time.Hour {
		n++
		total += Backoff(n, time.Second, time.Hour)
	}
	if n < 25 || n > 40 {
		t.Errorf("%d attempts in 24 h", n)
	}
}

func TestJitter(t *testing.T) {
	d := 8 * time.Second
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 6 * time.Second}, {0.5, 8 * time.Second}, {0.999999, 10*time.Second - 4*time.Microsecond}} {
		if got := Jitter(d, tc.r); got < tc.want-time.Millisecond || got > tc.want+time.Millisecond {
			t.Errorf("Jitter(%s, %v) = %s, want about %s", d, tc.r, got, tc.want)
		}
	}
}
