package sdk_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// continuing is a handler that produces want in pieces of 4 bytes,
// resuming after what the client has: it emits only what follows
// Task.Resume and returns only that. It reports each task it is given.
func continuing(want string, got chan<- *sdk.Task) sdk.HandlerFunc {
	return func(_ context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
		got <- task
		rest, _ := strings.CutPrefix(want, task.Resume)
		for _, piece := range splitEvery(rest, 4) {
			if err := emit(piece); err != nil {
				return sdk.Result{}, err
			}
		}
		return sdk.Result{Text: rest, Usage: &sdk.Usage{CompletionTokens: len(rest)}}, nil
	}
}

func splitEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func TestResumeIsDeclaredOnlyWhenAskedFor(t *testing.T) {
	for _, tc := range []struct {
		resume bool
		want   []string
	}{
		{false, []string{wire.FeatureTaskCancel}},
		{true, []string{wire.FeatureTaskCancel, wire.FeatureResume}},
	} {
		ctx := waitCtx(t)
		h := start(t, func(c *sdk.NodeConfig) { c.Resume = tc.resume })
		c, err := h.srv.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := c.Accept(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(reg.Features, tc.want) {
			t.Errorf("Resume %v: node_register features %q, want %q", tc.resume, reg.Features, tc.want)
		}
	}
}

// A node that declared resume is handed the text the client has; its
// chunks and result are only the continuation. The assignment is the
// largest the coordinator may send (content and resume_text of characters
// JSON writes in 6 bytes each, over 7 MiB): the node reads it whole.
func TestResumedStreamStreamsOnlyTheContinuation(t *testing.T) {
	ctx := waitCtx(t)
	full := strings.Repeat("<", 1<<20) + "and the rest"
	got := make(chan *sdk.Task, 1)
	h := start(t, func(c *sdk.NodeConfig) {
		c.Resume = true
		c.Handler = continuing(full, got)
	})
	c := h.registered(ctx, "n1")
	content := strings.Repeat("\x01", 200_000)
	p := wire.TaskAssignPayload{TaskID: "t1", TaskType: "chat", Content: content, Stream: true, ResumeText: full[:1<<20]}
	if b := wire.MustEncode(wire.MsgTaskAssign, p); len(b) <= wire.MaxMessageBytes+64<<10 {
		t.Fatalf("the task_assign is %d bytes: not past the old read limit", len(b))
	}
	assign(t, ctx, c, p)

	var task *sdk.Task
	select {
	case task = <-got:
	case <-ctx.Done():
		t.Fatal("the handler was not given the task")
	}
	if task.Resume != full[:1<<20] || task.Content != content || !task.Stream {
		t.Errorf("handler got resume of %d bytes, content of %d, stream %v", len(task.Resume), len(task.Content), task.Stream)
	}
	var deltas []string
	for {
		env, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if env.MsgType == wire.MsgTaskChunk {
			var ch wire.TaskChunkPayload
			if err := env.DecodePayload(&ch); err != nil {
				t.Fatal(err)
			}
			deltas = append(deltas, ch.Delta)
			continue
		}
		var res wire.TaskResultPayload
		if env.MsgType != wire.MsgTaskResult || env.DecodePayload(&res) != nil {
			t.Fatalf("unexpected %s %.200s", env.MsgType, env.Payload)
		}
		if res.TaskID != "t1" || res.Status != wire.StatusCompleted || res.Result != "and the rest" ||
			res.Usage == nil || res.Usage.CompletionTokens != len("and the rest") {
			t.Errorf("task_result = %+v", res)
		}
		break
	}
	if !slices.Equal(deltas, []string{"and ", "the ", "rest"}) {
		t.Errorf("chunks %q, want only the continuation", deltas)
	}
}

// An assignment to resume that the coordinator should never send — to a
// node that did not declare resume, or one that does not stream — is
// refused at once with status "rejected" and never reaches the handler:
// running it from the start would repeat to the client what it has.
func TestResumeRefusedWhenNotDeclaredOrNotStreaming(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resume bool
		stream bool
		want   string
	}{
		{"not declared", false, true, "did not declare the resume feature"},
		{"not streaming", true, false, "does not stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := waitCtx(t)
			got := make(chan *sdk.Task, 2)
			h := start(t, func(c *sdk.NodeConfig) {
				c.Resume = tc.resume
				c.Handler = continuing("abcdef", got)
			})
			c := h.registered(ctx, "n1")
			assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "r", TaskType: "echo", Stream: tc.stream, ResumeText: "abc"})
			var res wire.TaskResultPayload
			if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
				t.Fatal(err)
			}
			if res.TaskID != "r" || res.Status != wire.StatusRejected || !strings.Contains(res.Result, tc.want) || res.NodeID != "n1" {
				t.Errorf("task_result = %+v, want rejected saying %q", res, tc.want)
			}
			// The node keeps serving, and a task without resume_text runs
			// from the start.
			assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t", TaskType: "echo", Params: json.RawMessage(`{}`)})
			if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
				t.Fatal(err)
			}
			if res.TaskID != "t" || res.Status != wire.StatusCompleted || res.Result != "abcdef" {
				t.Errorf("task_result = %+v", res)
			}
			if task := <-got; task.ID != "t" || task.Resume != "" {
				t.Errorf("the handler got %+v, want only task t", task)
			}
		})
	}
}
