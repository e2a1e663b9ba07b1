package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// readAssign reads a task_assign into the task its handler is given. An
// error means the node cannot run it (a params value beyond what
// encoding/json holds, say); assignTaskID may still name it. resume says
// whether the node declared wire.FeatureResume: an assignment that resumes
// a stream is refused without it, and also when it does not stream (the
// coordinator sends neither), rather than run from the start, which would
// repeat to the client what it already has.
func readAssign(env wire.Envelope, resume bool) (*Task, error) {
	var p struct {
		wire.TaskAssignPayload
		// Params shadows the payload's raw params (kept raw for the
		// coordinator to pass through), so that they are decoded into the
		// handler's map in the same pass as the rest.
		Params map[string]any `json:"params"`
	}
	if err := env.DecodePayload(&p); err != nil {
		return nil, err
	}
	if p.TaskID == "" {
		return nil, errors.New("task_assign without a task_id")
	}
	if p.ResumeText != "" {
		switch {
		case !resume:
			return nil, errors.New("resume_text sent to a node that did not declare the resume feature")
		case !p.Stream:
			return nil, errors.New("resume_text on an assignment that does not stream")
		}
	}
	if p.Params == nil {
		p.Params = map[string]any{}
	}
	return &Task{ID: p.TaskID, Type: p.TaskType, Content: p.Content, Params: p.Params, Stream: p.Stream, Resume: p.ResumeText}, nil
}

// startTask registers the task for task_cancel and runs it in its own
// goroutine. A task_assign for a task id already running is dropped.
func (s *session) startTask(sctx context.Context, t *Task) {
	id := t.ID // the handler gets t, and may change it
	tctx, cancel := context.WithCancel(sctx)
	s.mu.Lock()
	if _, dup := s.tasks[id]; dup {
		s.mu.Unlock()
		cancel()
		s.log.Warn("ignoring a second task_assign for a running task", "task_id", id)
		return
	}
	s.tasks[id] = cancel
	s.mu.Unlock()

	s.wg.Go(func() {
		defer func() {
			s.mu.Lock()
			delete(s.tasks, id)
			s.mu.Unlock()
			cancel()
		}()
		s.runTask(tctx, t)
	})
}

// cancelTask cancels a running task's context; its handler is expected to
// return soon, and no task_result is sent for it. Unknown ids are ignored:
// the task may have just finished.
func (s *session) cancelTask(p wire.TaskCancelPayload) {
	s.mu.Lock()
	cancel, ok := s.tasks[p.TaskID]
	s.mu.Unlock()
	if ok {
		s.log.Debug("task cancelled by the server", "task_id", p.TaskID, "reason", p.Reason)
		cancel()
	}
}

// acquire takes a handler slot, waiting for one if all are busy; it reports
// false if ctx ended first.
func (n *Node) acquire(ctx context.Context) bool {
	select {
	case n.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// tryAcquire takes a handler slot if one is free.
func (n *Node) tryAcquire() bool {
	select {
	case n.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (n *Node) release() { <-n.slots }

func (s *session) runTask(ctx context.Context, t *Task) {
	id, stream := t.ID, t.Stream // the handler gets t, and may change it
	if !s.n.tryAcquire() {
		// The server tracks our free slots (max_concurrency) and should
		// never send more, though a benchmark probe holds a slot it does not
		// count. Waiting is better than refusing the task.
		s.log.Warn("task assigned while every slot is busy (server over-commit or a benchmark running); it waits for a slot",
			"task_id", id, "max_concurrency", s.n.cfg.MaxConcurrency)
		if !s.n.acquire(ctx) {
			return
		}
	}

	em := &emitter{s: s, ctx: ctx, taskID: id, stream: stream}
	res, elapsed, err := s.n.call(ctx, t, em.emit)
	em.close()
	// Free the slot before the result leaves: the server frees its own on
	// receipt and may assign the next task at once; that one must find the
	// slot free, or it would wait and log an over-commit that did not happen.
	s.n.release()

	if ctx.Err() != nil {
		s.log.Debug("task cancelled; no result sent", "task_id", id, "err", err)
		return
	}
	out := wire.TaskResultPayload{
		TaskID:           id,
		NodeID:           s.nodeID,
		Status:           wire.StatusCompleted,
		Result:           res.Text,
		ProcessingTimeMs: roundMs(elapsed),
		Usage:            res.Usage,
	}
	if err != nil {
		s.log.Debug("handler failed", "task_id", id, "err", err)
		out.Status, out.Result, out.Usage = wire.StatusFailed, err.Error(), nil
		if errors.Is(err, ErrUnavailable) {
			out.Status = wire.StatusUnavailable
		}
	}
	err = s.send(wire.MsgTaskResult, out)
	if errors.Is(err, errTooLarge) {
		s.log.Warn("result too large; reporting the task failed", "task_id", id, "bytes", len(out.Result))
		out.Status, out.Usage = wire.StatusFailed, nil
		out.Result = fmt.Sprintf("result of %d bytes exceeds the 4 MiB message limit", len(res.Text))
		err = s.send(wire.MsgTaskResult, out)
	}
	if err != nil {
		s.log.Debug("task_result not sent", "task_id", id, "err", err)
	}
}

// assignTaskID reads just the task_id of a task_assign that readAssign
// could not read, so that it can be refused by name.
func assignTaskID(env wire.Envelope) string {
	var p struct {
		TaskID any `json:"task_id"`
	}
	_ = json.Unmarshal(env.Payload, &p)
	id, _ := p.TaskID.(string)
	return id
}

// reject answers a task_assign the node cannot run with a task_result of
// status "rejected": the task fails at once, and the coordinator can tell
// the request's (or its own) fault from a handler's failure
// (docs/PROTOCOL.md).
func (s *session) reject(taskID string, cause error) {
	msg := "the node cannot run this task_assign"
	if cause != nil {
		msg += ": " + cause.Error()
	}
	err := s.send(wire.MsgTaskResult, wire.TaskResultPayload{TaskID: taskID, NodeID: s.nodeID, Status: wire.StatusRejected, Result: msg})
	if err != nil {
		s.log.Debug("task_result not sent", "task_id", taskID, "err", err)
	}
}

// call runs the handler and measures only the handler: the time reported as
// processing_time_ms, which the load test subtracts from the client's latency
// to find the coordinator's share. A panic fails the task instead of the node.
func (n *Node) call(ctx context.Context, t *Task, emit func(string) error) (res Result, elapsed time.Duration, err error) {
	n.active.Add(1)
	start := time.Now()
	defer func() {
		elapsed = time.Since(start)
		n.active.Add(-1)
		if r := recover(); r != nil {
			n.log.Error("handler panicked", "task_id", t.ID, "panic", r, "stack", string(debug.Stack()))
			res, err = Result{}, fmt.Errorf("handler panicked: %v", r)
		}
	}()
	res, err = n.cfg.Handler.Handle(ctx, t, emit)
	return res, elapsed, err
}

// roundMs rounds to the nearest millisecond, so that the reported time is
// off by at most half a millisecond either way rather than always short.
func roundMs(d time.Duration) int64 {
	return int64((d + time.Millisecond/2) / time.Millisecond)
}

// emitter is the emit function a handler receives. Chunks of one task go out
// in the order emit was called, and none after the handler returned.
type emitter struct {
	s      *session
	ctx    context.Context
	taskID string
	stream bool

	mu     sync.Mutex
	closed bool
}

var errEmitAfterReturn = errors.New("sdk: emit called after the handler returned")

func (e *emitter) emit(delta string) error {
	if !e.stream {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return errEmitAfterReturn
	case e.ctx.Err() != nil:
		return e.ctx.Err()
	case delta == "":
		return nil
	}
	return e.s.send(wire.MsgTaskChunk, wire.TaskChunkPayload{TaskID: e.taskID, Delta: delta})
}

func (e *emitter) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

// runBenchmark answers a benchmark probe by running the handler on each
// prompt in turn, as a non-streaming task of the node's first capability.
// Each prompt takes a slot like any task, so a probe never over-commits.
func (s *session) runBenchmark(ctx context.Context, prompts []string) {
	results := make([]wire.BenchmarkItem, 0, len(prompts))
	noEmit := func(string) error { return nil }
	for i, prompt := range prompts {
		if !s.n.acquire(ctx) {
			return
		}
		t := &Task{
			ID:      fmt.Sprintf("benchmark-%d", i+1),
			Type:    s.n.cfg.Capabilities[0],
			Content: prompt,
			Params:  map[string]any{},
		}
		res, elapsed, err := s.n.call(ctx, t, noEmit)
		s.n.release()
		if ctx.Err() != nil {
			return
		}
		item := wire.BenchmarkItem{Prompt: prompt, Response: res.Text, TimeMs: roundMs(elapsed), Success: err == nil}
		if err != nil {
			item.Response = ""
		}
		results = append(results, item)
	}
	if err := s.send(wire.MsgBenchmarkResult, wire.BenchmarkResultPayload{NodeID: s.nodeID, Results: results}); err != nil {
		s.log.Debug("benchmark_result not sent", "err", err)
	}
}
