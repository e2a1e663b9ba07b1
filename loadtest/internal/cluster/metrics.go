package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// counterFamilies are the switchyard counters a reader of a failed run
// wants next to the figures: refusals and retries, dropped answers, dead
// owners, closes, claims.
var counterFamilies = []string{
	"switchyard_tasks_refusals_total",
	"switchyard_tasks_dropped_events_total",
	"switchyard_tasks_owner_died_total",
	"switchyard_tasks_cancels_total",
	"switchyard_tasks_replace_closes_total",
	"switchyard_bus_publish_no_receiver_total",
	"switchyard_bus_resubscriptions_total",
	"switchyard_nodes_closes_total",
	"switchyard_nodes_send_queue_drops_total",
	"switchyard_nodes_handshake_rejections_total",
	"switchyard_claims_total",
	"switchyard_claims_stolen_total",
	"switchyard_store_dropped_total",
}

// ScrapeCounters reads an instance's /metrics and returns the non-zero
// series of counterFamilies, by their full name with labels.
func ScrapeCounters(ctx context.Context, hc *http.Client, baseURL string) (map[string]float64, error) {
	var out map[string]float64
	err := scrapeMetrics(ctx, hc, baseURL, func(r io.Reader) error {
		out = parseCounters(r)
		return nil
	})
	return out, err
}

// ScrapeMallocs reads an instance's heap allocations so far
// (go_memstats_mallocs_total, the Go collector's counter on /metrics).
func ScrapeMallocs(ctx context.Context, hc *http.Client, baseURL string) (float64, error) {
	v := -1.0
	err := scrapeMetrics(ctx, hc, baseURL, func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "go_memstats_mallocs_total "); ok {
				var err error
				v, err = strconv.ParseFloat(s, 64)
				return err
			}
		}
		return sc.Err()
	})
	if err == nil && v < 0 {
		err = fmt.Errorf("%s/metrics has no go_memstats_mallocs_total", baseURL)
	}
	return v, err
}

// scrapeMetrics GETs an instance's /metrics (within 5 s) and hands the body
// to read.
func scrapeMetrics(ctx context.Context, hc *http.Client, baseURL string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return read(resp.Body)
}

func parseCounters(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name, val := line[:i], line[i+1:]
		family := name
		if j := strings.IndexByte(name, '{'); j >= 0 {
			family = name[:j]
		}
		keep := false
		for _, f := range counterFamilies {
			keep = keep || family == f
		}
		if !keep {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err == nil && v != 0 {
			out[strings.TrimPrefix(name, "switchyard_")] = v
		}
	}
	return out
}
