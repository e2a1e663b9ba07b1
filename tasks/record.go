package tasks

import (
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// newRecord starts the record of a task as the client asked for it.
func (d *dispatcher) newRecord(req *Request, start time.Time) store.TaskRecord {
	return store.TaskRecord{
		ID: req.TaskID, AccountID: req.AccountID, KeyID: req.KeyID, TaskType: req.TaskType, Stream: req.Stream,
		Requester: d.cfg.Instance, CreatedAt: start.UTC(), ContentBytes: int64(len(req.Content)),
	}
}

// record completes rec with the task's end (its outcome, or its error),
// counts it, and hands it to the recorder: once per request, for a plain
// task (finish) and a split one (runSplit) alike (invariant 3).
func (d *dispatcher) record(rec *store.TaskRecord, start, now time.Time, out Outcome, err error) {
	rec.FinishedAt = now.UTC()
	outcome := string(out.Status)
	if err == nil {
		rec.Status, rec.ProcessingMs, rec.ResultBytes = string(out.Status), out.ProcessingMs, int64(len(out.Result))
		if out.Usage != nil {
			rec.Usage = *out.Usage
		}
	} else {
		e := AsError(err)
		outcome = string(e.Code)
		rec.Status, rec.ErrorCode = store.StatusError, string(e.Code)
		if e.Code == CodeCanceled {
			rec.Status = store.StatusCanceled
		}
	}
	if outcome == string(StatusCompleted) {
		d.metrics.completed.Inc()
	} else {
		d.metrics.outcomes.WithLabelValues(outcome).Inc()
	}
	took := d.metrics.plainTime
	if rec.Stream {
		took = d.metrics.streamTime
	}
	took.Observe(now.Sub(start).Seconds())
	d.recordStats(rec, start, now, out, err)
	d.rec.RecordTask(*rec)
}

// recordStats counts the request in the operator's figures (stats.go). A
// request whose client went away is left out: nobody waited for its end.
func (d *dispatcher) recordStats(rec *store.TaskRecord, start, now time.Time, out Outcome, err error) {
	code, msg := "", ""
	switch {
	case err != nil:
		e := AsError(err)
		if e.Code == CodeCanceled {
			return
		}
		code, msg = string(e.Code), e.Message
	case out.Status != StatusCompleted:
		code, msg = string(CodeTaskFailed), out.Result
	}
	node := ""
	if len(rec.NodeIDs) > 0 {
		node = rec.NodeIDs[0]
	}
	d.stats.add(rec.TaskType, now, now.Sub(start), code, node, msg)
}
