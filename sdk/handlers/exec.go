package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

const (
	// execWaitDelay is how long a cancelled command (and whatever it started
	// that still holds its output open) gets after the kill before Wait gives up.
	execWaitDelay = 2 * time.Second
	// stderrTail is how much of the end of stderr is kept for the error.
	stderrTail = 4 << 10
	// stderrLines is how many of its last lines the error quotes.
	stderrLines = 5
)

// errOutputTooLarge: the output would not fit in a task_result message.
var errOutputTooLarge = fmt.Errorf("command output exceeds %d bytes", sdk.MaxMessageBytes)

// ResumeFileEnv names the environment variable through which Exec gives a
// resumed task's command the text the client already has: the path of a
// file holding it. The text may be a megabyte or more, past what one
// environment variable holds on Linux (128 KiB), hence a file.
const ResumeFileEnv = "SWITCHYARD_RESUME_FILE"

// ExitUnavailable is the exit status (EX_TEMPFAIL) by which Exec's command
// says that this node cannot run the task now (out of memory, its model not
// loaded), not that the task failed: Exec returns sdk.ErrUnavailable, and
// switchyard runs the task again on another node.
const ExitUnavailable = 75

// Exec runs the command name with args once per task. The task's content is
// its stdin; SWITCHYARD_TASK_ID, SWITCHYARD_TASK_TYPE and
// SWITCHYARD_TASK_PARAMS (JSON) are added to its environment. Its whole
// stdout is the result; when the task streams, each line of stdout (with its
// newline) is sent as a chunk as soon as it is written. A non-zero exit fails
// the task with the last lines of stderr (exit ExitUnavailable, 75: the node
// cannot run it now, and it runs again elsewhere). Cancelling ctx kills the
// command.
//
// A resumed task's command finds the text the client already has in the
// file that SWITCHYARD_RESUME_FILE (ResumeFileEnv) names, and must write
// only what follows it: its stdout is the continuation, sent and returned
// as it is. The variable is unset for any other task, and the file (mode
// 0600, in the temporary directory) is removed when the command has ended.
func Exec(name string, args []string) sdk.Handler {
	args = slices.Clone(args)
	return sdk.HandlerFunc(func(ctx context.Context, t *sdk.Task, emit func(string) error) (sdk.Result, error) {
		params, err := json.Marshal(t.Params)
		if err != nil {
			return sdk.Result{}, fmt.Errorf("encode params: %w", err)
		}
		// The node's own environment, less a resume file it may have
		// inherited: that one would tell a command the client has a text
		// it does not.
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, ResumeFileEnv+"=") })
		env = append(env,
			"SWITCHYARD_TASK_ID="+t.ID,
			"SWITCHYARD_TASK_TYPE="+t.Type,
			"SWITCHYARD_TASK_PARAMS="+string(params))
		if t.Resume != "" {
			path, err := writeResumeFile(t.Resume)
			if err != nil {
				return sdk.Result{}, err
			}
			defer os.Remove(path)
			env = append(env, ResumeFileEnv+"="+path)
		}
		// Its own context, so that giving up on the output also kills the command.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cmd := exec.CommandContext(cctx, name, args...)
		cmd.Stdin = strings.NewReader(t.Content)
		cmd.Env = env
		// Not pipes we read ourselves: os/exec copies into these writers and,
		// WaitDelay after a kill, closes its pipes even if something the
		// command started still holds them open.
		out := &lineWriter{emit: emit, onErr: cancel}
		cmd.Stdout = out
		stderr := &tailBuffer{max: stderrTail}
		cmd.Stderr = stderr
		cmd.WaitDelay = execWaitDelay
		err = cmd.Run()
		if err == nil {
			err = out.flush()
		}
		switch {
		case ctx.Err() != nil:
			return sdk.Result{}, ctx.Err()
		case out.err != nil:
			return sdk.Result{}, out.err
		case err != nil:
			var unavailable error // exit 75: this node cannot run it now
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == ExitUnavailable {
				unavailable = sdk.ErrUnavailable
			}
			if tail := stderr.lastLines(stderrLines); tail != "" {
				return sdk.Result{}, errors.Join(fmt.Errorf("%s: %v: %s", name, err, tail), unavailable)
			}
			return sdk.Result{}, errors.Join(fmt.Errorf("%s: %v", name, err), unavailable)
		}
		return sdk.Result{Text: out.text.String()}, nil
	})
}

// writeResumeFile writes a resumed task's text to a new file only this
// user can read, and returns its path.
func writeResumeFile(text string) (string, error) {
	f, err := os.CreateTemp("", "switchyard-resume-*")
	if err != nil {
		return "", fmt.Errorf("write the resumed text for the command: %w", err)
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("write the resumed text for the command: %w", err)
	}
	return f.Name(), nil
}

// lineWriter collects stdout and emits it line by line. os/exec writes to it
// from one goroutine, and Wait returns only after that goroutine has ended.
type lineWriter struct {
	emit    func(string) error
	onErr   func() // stops the command once emitting has failed
	text    strings.Builder
	emitted int // bytes of text already emitted
	err     error
}

func (w *lineWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.text.Len()+len(p) > sdk.MaxMessageBytes {
		return 0, w.fail(errOutputTooLarge)
	}
	w.text.Write(p)
	s := w.text.String()
	for {
		i := strings.IndexByte(s[w.emitted:], '\n')
		if i < 0 {
			return len(p), nil
		}
		line := s[w.emitted : w.emitted+i+1]
		w.emitted += i + 1
		if err := w.emit(line); err != nil {
			return 0, w.fail(err)
		}
	}
}

// flush emits the last line if it had no newline.
func (w *lineWriter) flush() error {
	s := w.text.String()
	if w.emitted == len(s) {
		return nil
	}
	rest := s[w.emitted:]
	w.emitted = len(s)
	if err := w.emit(rest); err != nil {
		return w.fail(err)
	}
	return nil
}

func (w *lineWriter) fail(err error) error {
	w.err = err
	w.onErr()
	return err
}

// tailBuffer keeps the last max bytes written to it. os/exec writes to it
// from one goroutine and Wait returns only after that goroutine has ended.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// lastLines returns the last n non-empty lines, joined by " | ".
func (t *tailBuffer) lastLines(n int) string {
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "" })
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
