package ledger

import (
	"sync"
	"testing"
	"time"
)

func TestLedgerEveryRequestHasExactlyOneOutcome(t *testing.T) {
	t0 := time.Now()
	l := New(t0)
	var wg sync.WaitGroup
	outcomes := []string{OutcomeOK, OutcomeError, OutcomeLost, OutcomeFailed}
	for i := range 400 {
		wg.Go(func() {
			r := l.Open(KindPlain, PhaseSteady, i%3, t0.Add(time.Duration(i)*time.Millisecond))
			l.HandlerStart(r.ID, i%7, i%3, t0.Add(time.Duration(i+1)*time.Millisecond))
			l.HandlerEnd(r.ID, t0.Add(time.Duration(i+5)*time.Millisecond))
			l.Close(r, t0.Add(time.Duration(i+10)*time.Millisecond), Answer{Outcome: outcomes[i%4], ProcMs: 4})
		})
	}
	wg.Wait()
	a := l.Accounting()
	if !a.OK() || a.Sent != 400 {
		t.Fatalf("accounting not OK: %+v", a)
	}
	for _, o := range outcomes {
		if a.Outcomes[o] != 100 {
			t.Errorf("%d × %s, want 100", a.Outcomes[o], o)
		}
	}
	if c := l.Counts(); c.InFlight != 0 || c.Lost != 100 {
		t.Errorf("counts %+v", c)
	}
	ids := map[int64]bool{}
	for _, r := range l.Records() {
		if ids[r.ID] {
			t.Fatalf("id %d twice", r.ID)
		}
		ids[r.ID] = true
		if r.Outcome == OutcomeOK && (r.LatencyMs != 10 || r.OverheadMs != 6) {
			t.Errorf("request %d: latency %g overhead %g, want 10 and 6", r.ID, r.LatencyMs, r.OverheadMs)
		}
	}
}

func TestLedgerCatchesASecondOutcomeAndAMissingOne(t *testing.T) {
	t0 := time.Now()
	l := New(t0)
	a := l.Open(KindPlain, PhaseSteady, 0, t0)
	l.Open(KindStream, PhaseSteady, 1, t0) // never closed
	l.Close(a, t0.Add(time.Second), Answer{Outcome: OutcomeOK})
	l.Close(a, t0.Add(2*time.Second), Answer{Outcome: OutcomeError, Code: "timeout"})
	acc := l.Accounting()
	if acc.OK() {
		t.Fatal("accounting OK despite a double outcome and a request without one")
	}
	if len(acc.Doubles) != 1 || len(acc.NoOutcome) != 1 || acc.NoOutcome[0] != 1 {
		t.Errorf("doubles %v, no outcome %v", acc.Doubles, acc.NoOutcome)
	}
	if a.Outcome != OutcomeOK || a.DoneMs != 1000 {
		t.Errorf("the first outcome must stand: %+v", a)
	}
}

func TestLedgerDuplicateExecution(t *testing.T) {
	t0 := time.Now()
	l := New(t0)
	r := l.Open(KindPlain, PhaseSteady, 0, t0)
	l.HandlerStart(r.ID, 1, 0, t0)
	l.HandlerStart(r.ID, 2, 1, t0)
	if l.HandlerStart(99, 1, 0, t0) {
		t.Error("HandlerStart accepted an id that was never sent")
	}
	l.Close(r, t0, Answer{Outcome: OutcomeOK})
	if acc := l.Accounting(); len(acc.Duplicates) != 1 {
		t.Errorf("duplicates %v, want [0]", acc.Duplicates)
	}
}

// A task the coordinator says it ran again (its answer's attempts) may be
// started once per attempt: that is a retry, not a duplicate execution.
func TestLedgerRetryIsNoDuplicate(t *testing.T) {
	t0 := time.Now()
	l := New(t0)
	r := l.Open(KindPlain, PhaseSteady, 0, t0)
	l.HandlerStart(r.ID, 1, 2, t0)
	l.HandlerStart(r.ID, 3, 0, t0)
	l.Close(r, t0, Answer{Outcome: OutcomeOK, Attempts: 2})
	acc := l.Accounting()
	if len(acc.Duplicates) != 0 || acc.Retried != 1 || r.NodeInst != 0 || len(r.Earlier) != 1 || r.Earlier[0] != 2 {
		t.Errorf("accounting %+v, record %+v: want a retry from instance 2, no duplicate", acc, r)
	}
}

func TestLedgerRunningOn(t *testing.T) {
	t0 := time.Now()
	l := New(t0)
	local := l.Open(KindPlain, PhaseSteady, 1, t0)  // sent to 1, runs on 1: not counted
	remote := l.Open(KindPlain, PhaseSteady, 0, t0) // sent to 0, runs on 1: counted
	other := l.Open(KindPlain, PhaseSteady, 1, t0)  // sent to 1, runs on 0
	l.HandlerStart(local.ID, 0, 1, t0)
	l.HandlerStart(remote.ID, 1, 1, t0)
	l.HandlerStart(other.ID, 2, 0, t0)
	if n := l.RunningOn(1); n != 1 {
		t.Errorf("RunningOn(1) = %d, want 1", n)
	}
	l.HandlerEnd(remote.ID, t0)
	if n := l.RunningOn(1); n != 0 {
		t.Errorf("after the handler returned, RunningOn(1) = %d, want 0", n)
	}
}
