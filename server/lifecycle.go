package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/sync/errgroup"
)

// How an instance runs its parts. Every component that runs something
// (the store writer, the webhook dispatcher, the bus, the task engine, the
// async pump, the stream log, the cluster directory, the App's own loops)
// has the same shape: New builds it and starts nothing; Run(ctx) runs it
// and returns only once everything it started has stopped, nil when ctx
// ended. App.Run starts every Run in one errgroup, each under the context
// of its stage; the drain (app.go) ends the stages one at a time, in the
// order that loses nothing, and waits for each before it goes on.
//
// A Run that returns an error before its stage was ended has failed on its
// own: it is logged, the App drains as on SIGTERM, and App.Run returns
// that error. One that ends with an error after its stage ended (the
// writer could not write everything in its budget) is logged only.

// stage is a set of Runs that stop together: stop ends its context and
// waits for them.
type stage struct {
	ctx    context.Context
	cancel context.CancelFunc
	runs   sync.WaitGroup
}

// newStage returns a stage under base (which the drain never cancels: only
// stop ends a stage).
func newStage(base context.Context) *stage {
	ctx, cancel := context.WithCancel(base)
	return &stage{ctx: ctx, cancel: cancel}
}

// stop ends the stage and waits for its Runs to return.
func (s *stage) stop() {
	s.cancel()
	s.runs.Wait()
}

// group is the App's one errgroup, and the first Run that failed on its own.
type group struct {
	log    *slog.Logger
	g      errgroup.Group
	failed chan struct{} // closed at the first failure
	once   sync.Once
}

func newGroup(log *slog.Logger) *group { return &group{log: log, failed: make(chan struct{})} }

// start runs run under s's context in the group. name is what the logs
// call the component.
func (gr *group) start(s *stage, name string, run func(context.Context) error) {
	s.runs.Add(1)
	gr.g.Go(func() error {
		defer s.runs.Done()
		err := run(s.ctx)
		switch {
		case err == nil:
			return nil
		case s.ctx.Err() == nil:
			gr.log.Error("a component stopped on its own; draining", "component", name, "err", err)
			gr.once.Do(func() { close(gr.failed) })
			return fmt.Errorf("%s: %w", name, err)
		default:
			gr.log.Error("a component stopped with an error", "component", name, "err", err)
			return nil
		}
	})
}

// wait waits for every Run and returns the first failure, if any.
func (gr *group) wait() error { return gr.g.Wait() }

// forever adapts a loop that runs until ctx ends and cannot fail (it logs
// what goes wrong and carries on) to a Run.
func forever(loop func(context.Context)) func(context.Context) error {
	return func(ctx context.Context) error {
		loop(ctx)
		return nil
	}
}
