package report

import (
	"testing"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
)

// mk builds a record: sent to via at sent ms, answered at done ms, run by a
// node on nodeInst (-1: none) from start to end (0: still running).
func mk(id int64, via int, sent, done float64, outcome, code string, nodeInst int, start, end float64) *ledger.Record {
	node := -1
	if nodeInst >= 0 {
		node = int(id)
	}
	r := &ledger.Record{ID: id, Kind: ledger.KindPlain, Phase: ledger.PhaseSteady, Via: via, SentMs: sent, DoneMs: done,
		Outcome: outcome, Code: code, Node: node, NodeInst: nodeInst, StartMs: start, EndMs: end,
		LatencyMs: done - sent}
	if code == "node_disconnected" {
		r.Status = 502
	}
	return r
}

func TestClassifyKill(t *testing.T) {
	f := FaultReport{Kind: config.FaultKill, Instance: 1, AtMs: 10000}
	recs := []*ledger.Record{
		mk(0, 0, 9900, 10450, ledger.OutcomeError, "node_disconnected", 1, 9910, 10000.2), // running on the victim's node
		mk(1, 0, 9800, 10050, ledger.OutcomeOK, "", 1, 9805, 9990),                        // handler done before the kill
		mk(2, 1, 9900, 10001, ledger.OutcomeError, ledger.CodeTransport, 0, 9905, 10100),  // sent to the victim
		mk(3, 0, 9950, 10200, ledger.OutcomeOK, "", 0, 9952, 10190),                       // all on the survivor
		mk(4, 0, 9000, 9500, ledger.OutcomeOK, "", 1, 9005, 9490),                         // over before the kill
		mk(5, 0, 9990, 10400, ledger.OutcomeError, "node_disconnected", -1, 0, 0),         // assign lost with the victim
		mk(6, 0, 10003, 10430, ledger.OutcomeError, "node_disconnected", -1, 0, 0),        // sent as Redis noticed
		mk(7, 0, 10300, 10301, ledger.OutcomeError, "no_node_available", -1, 0, 0),        // after the kill: must not fail
		mk(8, 1, 10000, 10000.4, ledger.OutcomeError, ledger.CodeTransport, 1, 0, 0),      // sent to the victim as it died
	}
	Classify(recs, f)
	want := []string{ClassVictimTask, ClassInTransit, ClassVictimRequester, ClassOther, ClassOther, ClassVictimTask, ClassVictimTask, ClassOther, ClassVictimRequester}
	for i, r := range recs {
		if r.Class != want[i] {
			t.Errorf("request %d: class %q, want %q", i, r.Class, want[i])
		}
	}

	Classify(recs, FaultReport{Kind: config.FaultKill, Instance: 1, Skipped: "1 instance"})
	for _, r := range recs {
		if r.Class != ClassOther {
			t.Errorf("with the fault skipped, request %d is %q", r.ID, r.Class)
		}
	}
}

func TestClassifySIGTERM(t *testing.T) {
	f := FaultReport{Kind: config.FaultSIGTERM, Instance: 0, AtMs: 5000, ExitMs: 7000}
	recs := []*ledger.Record{
		mk(0, 0, 4900, 5300, ledger.OutcomeOK, "", 1, 4905, 5290),
		mk(1, 1, 4900, 5300, ledger.OutcomeOK, "", 0, 4905, 5290),
		mk(2, 1, 4900, 5300, ledger.OutcomeOK, "", 1, 4905, 5290),
	}
	Classify(recs, f)
	for i, want := range []string{ClassDrainRequester, ClassDrainTask, ClassOther} {
		if recs[i].Class != want {
			t.Errorf("request %d: %q, want %q", i, recs[i].Class, want)
		}
	}
	if from, to, ok := faultWindow(f, 5000); !ok || from != 5000 || to != 12000 {
		t.Errorf("fault window %g–%g %v, want 5000–12000 (settle counts from the exit)", from, to, ok)
	}
}
