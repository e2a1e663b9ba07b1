package server

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/nodes"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Demand is what an autoscaler reads (GET /api/v1/capabilities): per task
// type, the nodes and slots there are, and the requests that wait for one
// and were served. The nodes and slots come from the directory (every
// instance's nodes); waiting and served are each instance's own, so each
// instance publishes its figures (bus.Figures, kind figuresDemand), once a
// second while it has any and once more when they drop to none, and the
// answer adds up every live instance's.

// demandStat is one instance's demand for one task type.
type demandStat struct {
	Waiting      int   `json:"waiting"`
	OldestWaitMs int64 `json:"oldest_wait_ms"`
	Served1m     int   `json:"served_1m"`
}

// capabilityItem is one task type of GET /api/v1/capabilities.
type capabilityItem struct {
	TaskType   string `json:"task_type"`
	Nodes      int    `json:"nodes"`
	SlotsTotal int    `json:"slots_total"`
	SlotsFree  int    `json:"slots_free"`
	demandStat
}

// demandTTL is how long an instance's published figures live: a few of
// its publishes, so a dead instance's waiting requests drop out soon.
const demandTTL = 5 * time.Second

// localDemand is this instance's figures now, by task type.
func (a *App) localDemand(now time.Time) map[string]demandStat {
	out := map[string]demandStat{}
	for t, w := range a.hub.Waiting() {
		out[t] = demandStat{Waiting: w.N, OldestWaitMs: now.Sub(w.Since).Milliseconds()}
	}
	for t, n := range a.engine.Served() {
		d := out[t]
		d.Served1m = n
		out[t] = d
	}
	return out
}

// The kinds of figures each instance publishes (bus.Figures).
const (
	figuresDemand = "demand" // map[task type]demandStat, this file
	figuresStats  = "stats"  // instanceStats, overview.go
)

// publishFigures writes this instance's figures every second while there
// are any, and deletes them once when there are none: nothing is written
// while the instance is idle. Two kinds: the demand (this file) and the
// operator's figures (overview.go), each with its own shape, so the public
// answer's stays as it is.
func (c *cluster) publishFigures(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	demand := &published{kind: figuresDemand}
	stats := &published{kind: figuresStats}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			var d, s []byte
			if m := c.app.localDemand(now); len(m) > 0 {
				d, _ = json.Marshal(m)
			}
			if st := c.app.localStats(); st.busy() {
				s, _ = json.Marshal(st)
			}
			c.publish(ctx, demand, d)
			c.publish(ctx, stats, s)
		}
	}
}

// published is one kind of figures publishFigures keeps, and whether this
// instance has some published now.
type published struct {
	kind string
	had  bool
}

// publish writes b as this instance's figures of p's kind, or deletes
// them once when b is nil.
func (c *cluster) publish(ctx context.Context, p *published, b []byte) {
	if b == nil && !p.had {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := c.figures.Put(wctx, p.kind, c.app.instanceID, b); err != nil {
		c.app.log.Debug("cannot publish this instance's figures", "kind", p.kind, "err", err)
		return
	}
	p.had = b != nil
}

// readPublished reads the figures of kind of each of the instances but
// this one, by instance id; instances without any (idle) are left out.
func (c *cluster) readPublished(ctx context.Context, ids []string, kind string) (map[string][]byte, error) {
	others := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != c.app.instanceID {
			others = append(others, id)
		}
	}
	return c.figures.Read(ctx, kind, others)
}

// remoteDemand reads every other live instance's figures.
func (c *cluster) remoteDemand(ctx context.Context) ([]map[string]demandStat, error) {
	ids, err := c.liveIDs(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := c.readPublished(ctx, ids, figuresDemand)
	if err != nil {
		return nil, err
	}
	var out []map[string]demandStat
	for _, b := range raw {
		var d map[string]demandStat
		if wire.CheckBounds(b) == nil && json.Unmarshal(b, &d) == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

// capabilities computes the cluster's figures. Without Redis, or with it
// unreachable, the other instances' waiting and served are left out (the
// nodes and slots are the directory's view either way).
func (a *App) capabilities(ctx context.Context) []capabilityItem {
	items := map[string]*capabilityItem{}
	item := func(t string) *capabilityItem {
		it := items[t]
		if it == nil {
			it = &capabilityItem{TaskType: t}
			items[t] = it
		}
		return it
	}
	for _, n := range a.dir.List("") {
		for _, t := range n.Capabilities {
			it := item(t)
			it.Nodes++
			it.SlotsTotal += n.MaxConcurrency
			if n.State == "" || n.State == nodes.StateServing { // paused, draining, quarantined: no new task
				it.SlotsFree += max(n.MaxConcurrency-n.ActiveTasks, 0)
			}
		}
	}
	all := []map[string]demandStat{a.localDemand(time.Now())}
	if a.cluster != nil && a.cluster.registry != nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		remote, err := a.cluster.remoteDemand(rctx)
		cancel()
		if err != nil {
			a.log.Debug("cannot read the other instances' demand", "err", err)
		}
		all = append(all, remote...)
	}
	for _, d := range all {
		for t, s := range d {
			it := item(t)
			it.Waiting += s.Waiting
			it.OldestWaitMs = max(it.OldestWaitMs, s.OldestWaitMs)
			it.Served1m += s.Served1m
		}
	}
	out := make([]capabilityItem, 0, len(items))
	for _, t := range slices.Sorted(maps.Keys(items)) {
		out = append(out, *items[t])
	}
	return out
}

// capabilitiesRoute is GET /api/v1/capabilities (ours): one item per task
// type, cluster-wide, for autoscalers (README, "Autoscaling").
func (a *App) capabilitiesRoute(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"capabilities": a.capabilities(c.Request().Context())})
}

// demandGauges are the same figures for Prometheus, by task type. A task
// type with no node and no demand for demandForget drops out, so the
// label's values stay bounded by what is in use.
type demandGauges struct {
	a    *App
	desc map[string]*prometheus.Desc

	mu   sync.Mutex
	seen map[string]time.Time // task type → when it last had a node or demand
}

const demandForget = 10 * time.Minute

func newDemandGauges(a *App) *demandGauges {
	g := &demandGauges{a: a, desc: map[string]*prometheus.Desc{}, seen: map[string]time.Time{}}
	for name, help := range map[string]string{
		"nodes":          "Nodes with this task type, cluster-wide.",
		"slots_total":    "Slots of those nodes, cluster-wide.",
		"slots_free":     "Free slots of those nodes, cluster-wide.",
		"waiting":        "Requests waiting for a free slot, cluster-wide.",
		"oldest_wait_ms": "How long the request waiting longest has waited, ms.",
		"served_1m":      "Requests served over the last minute, cluster-wide.",
	} {
		g.desc[name] = prometheus.NewDesc("switchyard_capability_"+name, help, []string{"task_type"}, nil)
	}
	return g
}

func (g *demandGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range g.desc {
		ch <- d
	}
}

// Collect reads the figures at scrape time (one Redis pipeline per scrape
// in a cluster, nothing between scrapes). Prometheus gives it no context:
// the read is bounded (a second) and ends with the App's root.
func (g *demandGauges) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	items := map[string]capabilityItem{}
	for _, it := range g.a.capabilities(g.a.root) {
		items[it.TaskType] = it
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for t, it := range items {
		if it.Nodes > 0 || it.Waiting > 0 || it.Served1m > 0 {
			g.seen[t] = now
		}
	}
	for t, last := range g.seen {
		if now.Sub(last) > demandForget {
			delete(g.seen, t)
			continue
		}
		it := items[t] // zero since it went: the series falls to 0 before it drops out
		for name, v := range map[string]float64{
			"nodes": float64(it.Nodes), "slots_total": float64(it.SlotsTotal), "slots_free": float64(it.SlotsFree),
			"waiting": float64(it.Waiting), "oldest_wait_ms": float64(it.OldestWaitMs), "served_1m": float64(it.Served1m),
		} {
			ch <- prometheus.MustNewConstMetric(g.desc[name], prometheus.GaugeValue, v, t)
		}
	}
}
