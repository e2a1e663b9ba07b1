package nodes

import (
	"encoding/json"
	"testing"
)

func TestLoad(t *testing.T) {
	cases := []struct {
		active, max int
		want        float64
	}{
		{0, 4, 0}, {1, 4, 0.25}, {3, 4, 0.75}, {4, 4, 1},
		{5, 4, 1},  // never over 1
		{-1, 4, 0}, // never under 0
		{1, 0, 0},  // no slots declared: no load to speak of
	}
	for _, c := range cases {
		if got := load(c.active, c.max); got != c.want {
			t.Errorf("load(%d, %d) = %v, want %v", c.active, c.max, got, c.want)
		}
	}
}

// Another instance's node is listed with the load of the free slots its
// owner wrote, online, whatever the entry says of active_tasks, load and
// online (an older writer sends none of the last two).
func TestRemoteEntryView(t *testing.T) {
	var e dirEntry
	raw := `{"node_id":"n","max_concurrency":4,"active_tasks":0,"free_slots":1,"gen":3}`
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		t.Fatal(err)
	}
	v := e.view()
	if !v.Online || v.Load != 0.75 || v.ActiveTasks != 3 || v.MaxConcurrency != 4 {
		t.Fatalf("view of %s: online %v, load %v, active %d of %d; want online, 0.75, 3 of 4", raw, v.Online, v.Load, v.ActiveTasks, v.MaxConcurrency)
	}
}
