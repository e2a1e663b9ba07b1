package server

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// GET /admin/api/overview: everything the dashboard (dashboard.go) shows,
// cluster-wide, from any instance. Each instance publishes its own live
// figures and its stats (tasks/stats.go) as {ns}:stats:{instance}, a JSON
// string with a TTL, on the ticker that publishes its demand (demand.go)
// and under the same rule: every second while it has any, deleted once
// when it has none. The answer merges them with the registry, the
// directory and the reputations. An admin route: it names instances,
// hosts and addresses, which the public ones never do (admin.go).

// instanceStats is what an instance publishes for the overview.
type instanceStats struct {
	InFlight   int    `json:"in_flight"`
	Forwarding int    `json:"forwarding"`
	Nodes      int    `json:"nodes"`
	NotReady   string `json:"not_ready,omitempty"`
	tasks.StatsSnapshot
}

// busy reports whether there is anything worth publishing: an idle
// instance writes nothing (its registry entry says it is there).
func (s instanceStats) busy() bool {
	return s.InFlight > 0 || s.Forwarding > 0 || !s.StatsSnapshot.Empty()
}

// localStats is this instance's figures now.
func (a *App) localStats() instanceStats {
	return instanceStats{InFlight: a.engine.Requesting(), Forwarding: a.engine.Forwarding(), Nodes: a.hub.Len(),
		NotReady: a.notReady(), StatsSnapshot: a.engine.Stats()}
}

// overview is the answer of GET /admin/api/overview.
type overview struct {
	GeneratedAt time.Time         `json:"generated_at"`
	Instance    string            `json:"instance_id"` // the instance that answered
	Instances   []overviewInst    `json:"instances"`
	Nodes       []overviewNode    `json:"nodes"`
	TaskTypes   []overviewType    `json:"task_types"`
	Failures    []overviewFailure `json:"failures"`
	// Warnings name the parts that could not be read (Redis or the store
	// did not answer): the rest is this instance's view.
	Warnings []string `json:"warnings"`
}

type overviewInst struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Host           string    `json:"host"`
	Addr           string    `json:"addr"`
	Version        string    `json:"version"`
	Mode           string    `json:"mode"`
	StartedAt      time.Time `json:"started_at"`
	UptimeSeconds  int64     `json:"uptime_seconds"`
	Nodes          int       `json:"nodes"`
	TasksInFlight  int       `json:"tasks_in_flight"`
	Ready          bool      `json:"ready"`
	NotReadyReason string    `json:"not_ready_reason,omitempty"`
	Draining       bool      `json:"draining"`
	Self           bool      `json:"self"` // the instance that answered
}

type overviewNode struct {
	nodes.NodeView
	InstanceName string             `json:"instance_name"`
	Reputation   *store.NodeReport  `json:"reputation"` // null when the store could not say
	Benchmark    *overviewBenchmark `json:"benchmark"`  // null: none measured
}

type overviewBenchmark struct {
	AvgMs  float64 `json:"avg_ms"`
	Passed bool    `json:"passed"`
}

type overviewType struct {
	capabilityItem
	Finished5m  int     `json:"finished_5m"`
	Failed5m    int     `json:"failed_5m"`
	ErrorRate   float64 `json:"error_rate"` // failed / finished over 5 minutes, 0 to 1
	P50Ms       float64 `json:"p50_ms"`
	P95Ms       float64 `json:"p95_ms"`
	SlotSeconds int     `json:"slot_seconds"`
	Finished    []int   `json:"finished"` // per slot, oldest first, the last one running
	Failed      []int   `json:"failed"`
}

type overviewFailure struct {
	tasks.Failure
	InstanceName string `json:"instance_name"`
	NodeName     string `json:"node_name,omitempty"` // when the node is still online
}

// adminOverview is GET /admin/api/overview.
func (a *App) adminOverview(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	return c.JSON(http.StatusOK, a.overview(ctx))
}

func (a *App) overview(ctx context.Context) overview {
	now := time.Now()
	out := overview{GeneratedAt: now.UTC(), Instance: a.instanceID, Warnings: []string{}}
	self := a.localStats()
	all := map[string]instanceStats{a.instanceID: self}
	insts := append([]overviewInst{a.selfInstance(now, self)}, a.otherInstances(ctx, now, all, &out.Warnings)...)
	slices.SortFunc(insts, func(x, y overviewInst) int {
		return cmp.Or(strings.Compare(x.Name, y.Name), strings.Compare(x.ID, y.ID))
	})
	out.Instances = insts
	names := make(map[string]string, len(insts))
	for _, in := range insts {
		names[in.ID] = in.Name
	}

	out.Nodes = a.overviewNodes(ctx, names, &out.Warnings)
	nodeNames := make(map[string]string, len(out.Nodes))
	for _, n := range out.Nodes {
		nodeNames[n.NodeID] = n.Name
	}

	snaps := make([]tasks.StatsSnapshot, 0, len(all))
	for _, s := range all {
		snaps = append(snaps, s.StatsSnapshot)
	}
	merged := tasks.MergeStats(snaps...)
	out.TaskTypes = overviewTypes(a.capabilities(ctx), merged)
	out.Failures = make([]overviewFailure, 0, len(merged.Failures))
	for _, f := range merged.Failures {
		out.Failures = append(out.Failures, overviewFailure{Failure: f, InstanceName: names[f.Instance], NodeName: nodeNames[f.NodeID]})
	}
	return out
}

// otherInstances lists the cluster's other instances, adding the figures
// each published to all. Every instance with an alive key counts, draining
// ones too: their tasks in flight are what an operator watches during a
// drain.
func (a *App) otherInstances(ctx context.Context, now time.Time, all map[string]instanceStats, warnings *[]string) []overviewInst {
	if a.cluster == nil || a.cluster.registry == nil {
		return nil
	}
	infos, err := a.cluster.registry.Instances(ctx)
	if err != nil {
		*warnings = append(*warnings, "cannot read the instance registry: "+err.Error())
	}
	ids := make([]string, 0, len(infos))
	for _, info := range infos {
		ids = append(ids, info.ID)
	}
	raw, err := a.cluster.readPublished(ctx, ids, figuresStats)
	if err != nil {
		*warnings = append(*warnings, "cannot read the other instances' figures: "+err.Error())
	}
	for id, b := range raw {
		var s instanceStats
		if wire.CheckBounds(b) == nil && json.Unmarshal(b, &s) == nil {
			all[id] = s
		}
	}
	var out []overviewInst
	for _, info := range infos {
		if info.ID == a.instanceID {
			continue
		}
		in := overviewInst{ID: info.ID, Name: info.Name, Host: info.Host, Addr: info.Addr, Version: info.Version,
			Mode:      a.cfg.Mode(), // a registry is multi-instance mode's alone
			StartedAt: info.StartedAt, UptimeSeconds: int64(now.Sub(info.StartedAt).Seconds()),
			Nodes: info.Nodes, Ready: !info.Draining, Draining: info.Draining}
		if info.Draining {
			in.NotReadyReason = "draining"
		}
		// What it published is fresher than its registry entry (written
		// once per heartbeat); an idle instance publishes nothing.
		if s, ok := all[info.ID]; ok {
			in.Nodes, in.TasksInFlight = s.Nodes, s.InFlight
			in.Ready, in.NotReadyReason = s.NotReady == "", s.NotReady
		}
		out = append(out, in)
	}
	return out
}

// selfInstance is the answering instance, from its own live figures.
func (a *App) selfInstance(now time.Time, s instanceStats) overviewInst {
	host, _ := os.Hostname()
	return overviewInst{ID: a.instanceID, Name: a.cfg.InstanceName, Host: host, Addr: a.Addr(), Version: a.cfg.Version,
		Mode: a.cfg.Mode(), StartedAt: a.started.UTC(), UptimeSeconds: int64(now.Sub(a.started).Seconds()),
		Nodes: s.Nodes, TasksInFlight: s.InFlight, Ready: s.NotReady == "", NotReadyReason: s.NotReady,
		Draining: a.draining.Load(), Self: true}
}

// overviewNodes lists the cluster's nodes with their reputation and
// benchmark: the directory's view (no I/O), and the reputations of the
// nodes this instance does not hold in one store read (cached briefly).
func (a *App) overviewNodes(ctx context.Context, instNames map[string]string, warnings *[]string) []overviewNode {
	views := a.dir.List("")
	bench := map[string]*overviewBenchmark{}
	caps := map[string]bool{}
	ids := make([]string, 0, len(views))
	for _, v := range views {
		ids = append(ids, v.NodeID)
		for _, t := range v.Capabilities {
			caps[t] = true
		}
	}
	var cands []nodes.Candidate
	for t := range caps {
		cands = a.dir.Candidates(cands[:0], t)
		for _, c := range cands {
			if c.HasBench {
				bench[c.NodeID] = &overviewBenchmark{AvgMs: math.Round(c.BenchMs*10) / 10, Passed: !c.BenchFailed}
			}
		}
	}
	clear(cands)
	reps, err := a.reports.get(ctx, a.rep, ids)
	if err != nil {
		*warnings = append(*warnings, "cannot read the nodes' reputations: "+err.Error())
	}
	out := make([]overviewNode, 0, len(views))
	for _, v := range views {
		n := overviewNode{NodeView: v, InstanceName: instNames[v.Instance], Benchmark: bench[v.NodeID]}
		if r, ok := reps[v.NodeID]; ok {
			n.Reputation = &r
		}
		out = append(out, n)
	}
	return out
}

// reportCache keeps the last reputations read for the overview a moment:
// a dashboard asks every second, and the scores move slowly.
type reportCache struct {
	mu sync.Mutex
	at time.Time
	m  map[string]store.NodeReport
}

const reportCacheTTL = 3 * time.Second

func (rc *reportCache) get(ctx context.Context, rep *store.Reputation, ids []string) (map[string]store.NodeReport, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	fresh := time.Since(rc.at) < reportCacheTTL
	for _, id := range ids {
		if _, ok := rc.m[id]; !ok {
			fresh = false
			break
		}
	}
	if fresh {
		return rc.m, nil
	}
	m, err := rep.Reports(ctx, ids)
	if err != nil {
		return m, err // not kept: the next call tries again
	}
	rc.m, rc.at = m, time.Now()
	return m, nil
}

// overviewTypes joins the demand figures with the merged stats, by task
// type: a type that has stats but no node now is listed too.
func overviewTypes(items []capabilityItem, st tasks.StatsSnapshot) []overviewType {
	byType := map[string]*overviewType{}
	for _, it := range items {
		byType[it.TaskType] = &overviewType{capabilityItem: it}
	}
	for t := range st.Types {
		if byType[t] == nil {
			byType[t] = &overviewType{capabilityItem: capabilityItem{TaskType: t}}
		}
	}
	out := make([]overviewType, 0, len(byType))
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		ot := byType[t]
		ot.SlotSeconds = int(tasks.StatsSlot / time.Second)
		ts, ok := st.Types[t]
		if !ok {
			ts = tasks.TypeStats{Finished: make([]int, tasks.StatsSlots), Failed: make([]int, tasks.StatsSlots)}
		}
		ot.Finished, ot.Failed = ts.Finished, ts.Failed
		for i := range ts.Finished {
			ot.Finished5m += ts.Finished[i]
			ot.Failed5m += ts.Failed[i]
		}
		if ot.Finished5m > 0 {
			ot.ErrorRate = math.Round(float64(ot.Failed5m)/float64(ot.Finished5m)*1000) / 1000
		}
		ot.P50Ms = math.Round(ts.Latency.Quantile(0.5)*10) / 10
		ot.P95Ms = math.Round(ts.Latency.Quantile(0.95)*10) / 10
		out = append(out, *ot)
	}
	return out
}
