package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

func TestRunNodeRefusesBadFlags(t *testing.T) {
	base := []string{"--api-key", "k", "--name", "w1", "--capability", "chat"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "w1", "--capability", "chat"}, "--api-key is required (create one with: switchyard accounts create --name NAME)"},
		{[]string{"--api-key", "k", "--capability", "chat"}, "--name is required"},
		{[]string{"--api-key", "k", "--name", "w1"}, "--capability is required"},
		{append(base, "--url", "localhost:8080"), "--url"},
		{append(base, "--url", "ftp://h/ws/node"), "must start with ws://"},
		{append(base, "--max-concurrency", "0"), "--max-concurrency must be at least 1"},
		{append(base, "--handler", "magic"), "--handler must be echo, sleep or exec"},
		{append(base, "--handler", "exec"), "--handler exec needs the command after --"},
		{append(base, "--handler", "echo", "--", "cat"), "only used with --handler exec"},
		{append(base, "--handler", "sleep", "--sleep-min", "2s", "--sleep-max", "1s"), "--sleep-min (2s) must be between 0 and --sleep-max (1s)"},
		{append(base, "--model-info", "[1]"), "--model-info must be a JSON object"},
		{append(base, "--log-level", "loud"), "--log-level"},
		{append(base, "--label", "region"), `--label "region" must be KEY=VALUE`},
		{append(base, "--label", "Region=eu"), "label key"},
		{append(base[:4], "--capability", "no spaces"), "capability"},
	} {
		err := runNode(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("runNode %q: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

func TestRunNodeHelp(t *testing.T) {
	var stderr bytes.Buffer
	err := runNode(context.Background(), []string{"--help"}, &bytes.Buffer{}, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: err = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"--handler exec -- python3 worker.py", "--sleep-chunks", "SWITCHYARD_API_KEY", "--resume", "$SWITCHYARD_RESUME_FILE"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestNodeWSURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://h:1/ws/node":  "ws://h:1/ws/node",
		"http://h:1":        "ws://h:1/ws/node",
		"https://h/":        "wss://h/ws/node",
		"wss://h/custom/ws": "wss://h/custom/ws",
	} {
		if got, err := nodeWSURL(in); err != nil || got != want {
			t.Errorf("nodeWSURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the node's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRunNodeServesTasks runs `switchyard node` against a minimal server
// that registers it, assigns one task and checks the result.
func TestRunNodeServesTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type outcome struct {
		reg wire.RegisterPayload
		res wire.TaskResultPayload
		err error
	}
	got := make(chan outcome, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			got <- outcome{err: err}
			return
		}
		defer c.CloseNow()
		var o outcome
		read := func(want wire.MsgType, v any) error {
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					return err
				}
				env, err := wire.ParseEnvelope(data)
				if err != nil || env.MsgType == wire.MsgHeartbeat {
					continue
				}
				if env.MsgType != want {
					return errors.New("got " + string(env.MsgType) + ", want " + string(want))
				}
				return env.DecodePayload(v)
			}
		}
		send := func(typ wire.MsgType, p any) error {
			data, err := wire.Encode(typ, p)
			if err != nil {
				return err
			}
			return c.Write(ctx, websocket.MessageText, data)
		}
		o.err = errors.Join(
			read(wire.MsgNodeRegister, &o.reg),
			send(wire.MsgNodeRegistered, wire.RegisteredPayload{NodeID: "node-42"}),
			send(wire.MsgTaskAssign, wire.TaskAssignPayload{TaskID: "t1", TaskType: "chat", Content: "ping"}),
			read(wire.MsgTaskResult, &o.res),
		)
		got <- o
		c.Read(ctx) // until the node goes
	}))
	defer srv.Close()

	t.Setenv("SWITCHYARD_API_KEY", "gn_from_env")
	var stdout, stderr syncBuffer
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runNode(runCtx, []string{"--url", srv.URL, "--name", "w1", "--capability", "chat,echo", "--max-concurrency", "2", "--languages", "en",
			"--label", "region=eu-west", "--label", "gpu=a100", "--node-version", "7.1"}, &stdout, &stderr)
	}()
	o := <-got
	stop()
	if err := <-done; err != nil {
		t.Errorf("runNode = %v after cancel, want nil", err)
	}
	if o.err != nil {
		t.Fatalf("server side: %v\nnode log:\n%s", o.err, stderr.String())
	}
	reg, _ := json.Marshal(o.reg)
	if o.reg.APIKey != "gn_from_env" || o.reg.Name != "w1" || strings.Join(o.reg.Capabilities, ",") != "chat,echo" ||
		o.reg.MaxConcurrency != 2 || strings.Join(o.reg.Languages, ",") != "en" ||
		o.reg.Version != "7.1" || len(o.reg.Labels) != 2 || o.reg.Labels["region"] != "eu-west" || o.reg.Labels["gpu"] != "a100" {
		t.Errorf("node_register = %s", reg)
	}
	if o.res.TaskID != "t1" || o.res.Status != "completed" || o.res.Result != "ping" {
		t.Errorf("task_result = %+v", o.res)
	}
	if !strings.Contains(stdout.String(), "node_id=node-42\n") {
		t.Errorf("stdout %q lacks the node id", stdout.String())
	}
	if strings.Contains(stderr.String(), "gn_from_env") {
		t.Error("the API key appears in the log")
	}
}

// TestRunNodeResumes: with --resume, `switchyard node` declares the feature
// and its handler continues a resumed stream, sending only what follows the
// text the client has; without it, the feature is not declared.
func TestRunNodeResumes(t *testing.T) {
	for _, resume := range []bool{false, true} {
		t.Run(map[bool]string{false: "without", true: "with"}[resume], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			type outcome struct {
				features []string
				deltas   []string
				res      wire.TaskResultPayload
				err      error
			}
			got := make(chan outcome, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					got <- outcome{err: err}
					return
				}
				defer c.CloseNow()
				var o outcome
				next := func() (wire.Envelope, error) {
					for {
						_, data, err := c.Read(ctx)
						if err != nil {
							return wire.Envelope{}, err
						}
						if env, err := wire.ParseEnvelope(data); err == nil && env.MsgType != wire.MsgHeartbeat {
							return env, nil
						}
					}
				}
				send := func(typ wire.MsgType, p any) error {
					return c.Write(ctx, websocket.MessageText, wire.MustEncode(typ, p))
				}
				env, err := next()
				var reg wire.RegisterPayload
				if o.err = errors.Join(err, env.DecodePayload(&reg)); o.err == nil {
					o.features = reg.Features
					o.err = errors.Join(
						send(wire.MsgNodeRegistered, wire.RegisteredPayload{NodeID: "node-42"}),
						send(wire.MsgTaskAssign, wire.TaskAssignPayload{TaskID: "t1", TaskType: "chat", Content: "hello world", Stream: true, ResumeText: "hello "}))
				}
				for o.err == nil {
					env, o.err = next()
					if env.MsgType == wire.MsgTaskResult {
						o.err = env.DecodePayload(&o.res)
						break
					}
					var ch wire.TaskChunkPayload
					if o.err == nil {
						o.err = env.DecodePayload(&ch)
						o.deltas = append(o.deltas, ch.Delta)
					}
				}
				got <- o
				c.Read(ctx) // until the node goes
			}))
			defer srv.Close()

			args := []string{"--url", srv.URL, "--api-key", "k", "--name", "w1", "--capability", "chat"}
			if resume {
				args = append(args, "--resume")
			}
			var stderr syncBuffer
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- runNode(runCtx, args, &bytes.Buffer{}, &stderr) }()
			o := <-got
			stop()
			if err := <-done; err != nil {
				t.Errorf("runNode = %v after cancel, want nil", err)
			}
			if o.err != nil {
				t.Fatalf("server side: %v\nnode log:\n%s", o.err, stderr.String())
			}
			declared := strings.Contains(strings.Join(o.features, ","), wire.FeatureResume)
			if declared != resume {
				t.Errorf("--resume %v: features %q", resume, o.features)
			}
			if !resume {
				if o.res.Status != wire.StatusRejected {
					t.Errorf("without --resume, a resumed task: %+v, want it rejected", o.res)
				}
				return
			}
			if o.res.Status != wire.StatusCompleted || o.res.Result != "world" || strings.Join(o.deltas, "|") != "world" {
				t.Errorf("resumed task: chunks %q, result %+v; want only %q", o.deltas, o.res, "world")
			}
		})
	}
}
