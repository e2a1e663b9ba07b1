package handlers_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// emitted records the chunks a handler emits and when.
type emitted struct {
	chunks []string
	at     []time.Time
	onEmit func(string)
}

func (e *emitted) emit(d string) error {
	e.chunks = append(e.chunks, d)
	e.at = append(e.at, time.Now())
	if e.onEmit != nil {
		e.onEmit(d)
	}
	return nil
}

func run(t *testing.T, ctx context.Context, h sdk.Handler, task sdk.Task) (sdk.Result, *emitted, error) {
	t.Helper()
	if task.Params == nil {
		task.Params = map[string]any{}
	}
	e := &emitted{}
	res, err := h.Handle(ctx, &task, e.emit)
	return res, e, err
}

func TestEcho(t *testing.T) {
	res, e, err := run(t, context.Background(), handlers.Echo(), sdk.Task{ID: "t", Content: "hello", Stream: true})
	if err != nil || res.Text != "hello" || strings.Join(e.chunks, "|") != "hello" {
		t.Errorf("Echo = %+v, chunks %q, %v", res, e.chunks, err)
	}
}

func TestSleepPlain(t *testing.T) {
	start := time.Now()
	res, e, err := run(t, context.Background(), handlers.Sleep(20*time.Millisecond, 20*time.Millisecond, 5), sdk.Task{ID: "t"})
	if err != nil || !strings.HasPrefix(res.Text, "slept ") || len(e.chunks) != 0 {
		t.Fatalf("Sleep = %+v, chunks %q, %v", res, e.chunks, err)
	}
	slept, err := time.ParseDuration(strings.TrimPrefix(res.Text, "slept "))
	if err != nil || slept < 20*time.Millisecond || slept > time.Since(start) {
		t.Errorf("reported %q for a 20 ms sleep that took %v", res.Text, time.Since(start))
	}
}

func TestSleepStreamsEvenlySpreadChunks(t *testing.T) {
	start := time.Now()
	res, e, err := run(t, context.Background(), handlers.Sleep(40*time.Millisecond, 40*time.Millisecond, 4), sdk.Task{ID: "t", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"chunk 1/4\n", "chunk 2/4\n", "chunk 3/4\n", "chunk 4/4\n"}
	if strings.Join(e.chunks, "") != strings.Join(want, "") {
		t.Fatalf("chunks %q", e.chunks)
	}
	for i, at := range e.at {
		if due := time.Duration(i+1) * 10 * time.Millisecond; at.Sub(start) < due {
			t.Errorf("chunk %d after %v, not before %v", i+1, at.Sub(start), due)
		}
	}
	if !strings.HasPrefix(res.Text, strings.Join(want, "")+"slept ") {
		t.Errorf("result %q", res.Text)
	}
}

func TestSleepRange(t *testing.T) {
	h := handlers.Sleep(5*time.Millisecond, 15*time.Millisecond, 0)
	for range 5 {
		res, _, err := run(t, context.Background(), h, sdk.Task{ID: "t"})
		slept, perr := time.ParseDuration(strings.TrimPrefix(res.Text, "slept "))
		if err != nil || perr != nil || slept < 5*time.Millisecond {
			t.Errorf("Sleep(5ms, 15ms) = %q, %v", res.Text, err)
		}
	}
	// hi below lo counts as lo.
	res, _, _ := run(t, context.Background(), handlers.Sleep(10*time.Millisecond, time.Millisecond, 0), sdk.Task{ID: "t"})
	if slept, err := time.ParseDuration(strings.TrimPrefix(res.Text, "slept ")); err != nil || slept < 10*time.Millisecond {
		t.Errorf("Sleep(10ms, 1ms) = %q", res.Text)
	}
}

func TestSleepHonoursCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, _, err := run(t, ctx, handlers.Sleep(time.Hour, time.Hour, 3), sdk.Task{ID: "t", Stream: true})
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled Sleep = %v after %v", err, time.Since(start))
	}
}

func TestExecStreamsLines(t *testing.T) {
	res, e, err := run(t, context.Background(), handlers.Exec("cat", nil), sdk.Task{ID: "t", Content: "a\nb\nc", Stream: true})
	if err != nil || res.Text != "a\nb\nc" || strings.Join(e.chunks, "|") != "a\n|b\n|c" {
		t.Errorf("cat = %q, chunks %q, %v", res.Text, e.chunks, err)
	}
}

func TestExecEmitsEachLineAsItIsWritten(t *testing.T) {
	// The command writes "one", then waits for a file that the test creates
	// only when "one" has been emitted.
	flag := filepath.Join(t.TempDir(), "go-on")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := &emitted{onEmit: func(line string) {
		if line == "one\n" {
			if err := os.WriteFile(flag, nil, 0o600); err != nil {
				t.Error(err)
			}
		}
	}}
	script := `echo one; while [ ! -e "$0" ]; do sleep 0.01; done; echo two`
	task := &sdk.Task{ID: "t", Stream: true, Params: map[string]any{}}
	res, err := handlers.Exec("sh", []string{"-c", script, flag}).Handle(ctx, task, e.emit)
	if err != nil || res.Text != "one\ntwo\n" || strings.Join(e.chunks, "") != "one\ntwo\n" {
		t.Errorf("Exec = %q, chunks %q, %v", res.Text, e.chunks, err)
	}
}

func TestExecEnvironment(t *testing.T) {
	h := handlers.Exec("sh", []string{"-c", `echo "$SWITCHYARD_TASK_ID $SWITCHYARD_TASK_TYPE $SWITCHYARD_TASK_PARAMS"`})
	res, _, err := run(t, context.Background(), h, sdk.Task{ID: "t7", Type: "shell", Params: map[string]any{"k": "v"}})
	if err != nil || res.Text != "t7 shell {\"k\":\"v\"}\n" {
		t.Errorf("env = %q, %v", res.Text, err)
	}
}

func TestExecFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"false", nil, []string{"exit status 1"}},
		{"sh", []string{"-c", "echo out; for i in 1 2 3 4 5 6 7; do echo err$i >&2; done; exit 3"},
			[]string{"exit status 3", "err3 | err4 | err5 | err6 | err7"}},
		{"/nonexistent/command", nil, []string{"no such file"}},
		{"head", []string{"-c", "5000000", "/dev/zero"}, []string{"exceeds"}},
	} {
		_, _, err := run(t, context.Background(), handlers.Exec(tc.name, tc.args), sdk.Task{ID: "t"})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s %q: err = %v, want it to contain %q", tc.name, tc.args, err, w)
			}
		}
		if err != nil && strings.Contains(err.Error(), "err2") {
			t.Errorf("error quotes more than the last 5 lines: %v", err)
		}
	}
}

// Exit 75 (ExitUnavailable) says the node cannot run the task now: the
// error wraps sdk.ErrUnavailable (the task runs again elsewhere); any other
// exit does not.
func TestExecUnavailable(t *testing.T) {
	_, _, err := run(t, context.Background(), handlers.Exec("sh", []string{"-c", "echo no GPU memory >&2; exit 75"}), sdk.Task{ID: "t"})
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "no GPU memory") {
		t.Fatalf("exit 75: %v; want sdk.ErrUnavailable with stderr's last line", err)
	}
	_, _, err = run(t, context.Background(), handlers.Exec("sh", []string{"-c", "exit 74"}), sdk.Task{ID: "t"})
	if err == nil || errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("exit 74: %v; want a plain failure", err)
	}
}

func TestExecCancelKillsTheCommand(t *testing.T) {
	for name, script := range map[string]string{
		"direct": "echo started; exec sleep 30",
		// The shell's child, started before the shell's first line, keeps
		// stdout (only) open after the shell is killed; WaitDelay must still
		// end the wait.
		"grandchild": "sleep 20 2>/dev/null & echo started; wait",
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e := &emitted{onEmit: func(string) { cancel() }}
			task := &sdk.Task{ID: "t", Stream: true, Params: map[string]any{}}
			start := time.Now()
			_, err := handlers.Exec("sh", []string{"-c", script}).Handle(ctx, task, e.emit)
			if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
				t.Errorf("cancelled command: %v after %v", err, time.Since(start))
			}
		})
	}
}

func TestExecStopsWhenEmitFails(t *testing.T) {
	gone := errors.New("connection gone")
	task := &sdk.Task{ID: "t", Stream: true, Params: map[string]any{}}
	// yes never ends by itself: only the failed emit can stop it.
	_, err := handlers.Exec("yes", nil).Handle(context.Background(), task, func(string) error { return gone })
	if !errors.Is(err, gone) {
		t.Errorf("err = %v, want the emit error", err)
	}
}

func TestEchoResumed(t *testing.T) {
	for _, tc := range []struct{ resume, want string }{
		{"hel", "lo"},
		{"hello", ""},
	} {
		res, e, err := run(t, context.Background(), handlers.Echo(), sdk.Task{ID: "t", Content: "hello", Stream: true, Resume: tc.resume})
		if err != nil || res.Text != tc.want || strings.Join(e.chunks, "") != tc.want {
			t.Errorf("Echo resumed after %q = %+v, chunks %q, %v; want %q", tc.resume, res, e.chunks, err, tc.want)
		}
	}
	if _, e, err := run(t, context.Background(), handlers.Echo(), sdk.Task{ID: "t", Content: "hello", Stream: true, Resume: "help"}); err == nil || len(e.chunks) != 0 {
		t.Errorf("Echo resumed after a text that is not its own: chunks %q, %v; want an error and no chunk", e.chunks, err)
	}
}

// Resumed, Sleep sends what follows the text the client has, from the
// middle of a chunk if it ends there, over the share of its time that
// the chunks left take.
func TestSleepResumed(t *testing.T) {
	all := []string{"chunk 1/4\n", "chunk 2/4\n", "chunk 3/4\n", "chunk 4/4\n"}
	for _, tc := range []struct {
		resume string
		want   []string
	}{
		{all[0] + all[1], all[2:]},
		{all[0] + "chu", []string{"nk 2/4\n", all[2], all[3]}},
		{strings.Join(all, ""), nil},
	} {
		start := time.Now()
		res, e, err := run(t, context.Background(), handlers.Sleep(40*time.Millisecond, 40*time.Millisecond, 4), sdk.Task{ID: "t", Stream: true, Resume: tc.resume})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(e.chunks, "|") != strings.Join(tc.want, "|") {
			t.Errorf("resumed after %q: chunks %q, want %q", tc.resume, e.chunks, tc.want)
		}
		for j, at := range e.at {
			if due := time.Duration(j+1) * 10 * time.Millisecond; at.Sub(start) < due {
				t.Errorf("resumed after %q: chunk %d after %v, not before %v", tc.resume, j+1, at.Sub(start), due)
			}
		}
		if !strings.HasPrefix(res.Text, strings.Join(tc.want, "")+"slept ") {
			t.Errorf("resumed after %q: result %q", tc.resume, res.Text)
		}
	}
	if _, _, err := run(t, context.Background(), handlers.Sleep(0, 0, 4), sdk.Task{ID: "t", Stream: true, Resume: "chunk 1/5\n"}); err == nil {
		t.Error("Sleep resumed after another handler's text: no error")
	}
}

// A resumed command finds the text the client has in the file
// SWITCHYARD_RESUME_FILE names; its output, streamed and returned, is what
// follows it (testdata/resumable.sh writes only that).
func TestExecResumed(t *testing.T) {
	h := handlers.Exec("bash", []string{"testdata/resumable.sh"})
	for _, tc := range []struct {
		resume string
		want   []string
	}{
		{"", []string{"line 1\n", "line 2\n", "line 3\n", "line 4\n", "line 5\n"}},
		{"line 1\nline 2\n", []string{"line 3\n", "line 4\n", "line 5\n"}},
		{"line 1\nli", []string{"ne 2\n", "line 3\n", "line 4\n", "line 5\n"}},
	} {
		res, e, err := run(t, context.Background(), h, sdk.Task{ID: "t", Stream: true, Resume: tc.resume})
		if err != nil || res.Text != strings.Join(tc.want, "") || strings.Join(e.chunks, "|") != strings.Join(tc.want, "|") {
			t.Errorf("resumed after %q: %q, chunks %q, %v; want %q", tc.resume, res.Text, e.chunks, err, tc.want)
		}
	}
	_, e, err := run(t, context.Background(), h, sdk.Task{ID: "t", Stream: true, Resume: "line 2\n"})
	if err == nil || !strings.Contains(err.Error(), "not the start") || len(e.chunks) != 0 {
		t.Errorf("resumed after a text the command did not write: chunks %q, %v", e.chunks, err)
	}
}

// The resumed text reaches the command whole however long it is (a
// megabyte does not fit in one environment variable), in a file that is
// gone once the command has ended; a task that is not resumed has no such
// variable, even when the node's own environment has one.
func TestExecResumeFile(t *testing.T) {
	t.Setenv(handlers.ResumeFileEnv, "/stale/from/the/node")
	h := handlers.Exec("sh", []string{"-c", `if [ -n "${SWITCHYARD_RESUME_FILE+set}" ]; then echo "$SWITCHYARD_RESUME_FILE"; wc -c <"$SWITCHYARD_RESUME_FILE"; else echo unset; fi`})
	res, _, err := run(t, context.Background(), h, sdk.Task{ID: "t", Stream: true})
	if err != nil || res.Text != "unset\n" {
		t.Errorf("a task that is not resumed: %q, %v; want the variable unset", res.Text, err)
	}
	big := strings.Repeat("x", 1<<20)
	res, _, err = run(t, context.Background(), h, sdk.Task{ID: "t", Stream: true, Resume: big})
	path, size, _ := strings.Cut(strings.TrimSpace(res.Text), "\n")
	if err != nil || strings.TrimSpace(size) != "1048576" {
		t.Fatalf("resumed after 1 MiB: %q, %v; want the file's size", res.Text, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the resume file %s is still there after the command: %v", path, err)
	}
}
