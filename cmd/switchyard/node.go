package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

const nodeSummary = `Run a worker node: connect to a switchyard server's node WebSocket, register
under --name with the account's --api-key, and serve the task types given by
--capability with a built-in handler:

  echo   returns the task's content (streamed as one chunk)
  sleep  sleeps between --sleep-min and --sleep-max at random, streaming
         --sleep-chunks chunks over that time (a simulated worker)
  exec   runs the command written after "--" once per task: the content on
         its stdin, its stdout the result (each line streamed), a non-zero
         exit a failure; exit 75 says this node cannot run it now (out of
         memory, model not loaded), and the task runs again on another
         node; for example
           switchyard node --api-key KEY --name w1 --capability chat \
             --handler exec -- python3 worker.py

With --resume the node declares that it can continue a stream another node
began and lost: the coordinator may then hand it such a stream, with the text
its client already has, and the node sends only what follows. echo and sleep
continue their own output; exec's command finds that text in the file named
by $SWITCHYARD_RESUME_FILE (unset when the task is not resumed; the text may
be a megabyte or more) and must write only what follows it, so give --resume
with exec only for a command that does.

The node prints its id once registered, reconnects by itself (backoff 1 s to
60 s) and stops on Ctrl-C, when another node registers with the same key and
name, or when the server refuses the key.`

// runNode is `switchyard node`.
func runNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("node", nodeSummary, stderr)
	rawURL := fs.String("url", localURL("ws", "/ws/node"), "the server's node WebSocket (http://HOST:PORT is completed to ws://HOST:PORT/ws/node)")
	apiKey := fs.String("api-key", "", "the account's API key (required)")
	name := fs.String("name", "", "the node's name; with the key it fixes the node id (required)")
	var caps, langs stringList
	fs.Var(&caps, "capability", "a task type this node serves; repeat it, or separate with commas (required)")
	fs.Var(&langs, "languages", "languages the node handles; repeat it, or separate with commas")
	modelInfo := fs.String("model-info", "", "a JSON object describing the model, sent at registration")
	maxConc := fs.Int("max-concurrency", 1, "how many tasks may run at once")
	nodeVersion := fs.String("node-version", "", "the version shown for this node in the listing and metrics (default: this binary's, "+version+")")
	var labels stringList
	fs.Var(&labels, "label", "a label KEY=VALUE, such as region=eu-west, that requests may require (node_labels); repeat it, or separate with commas")
	handler := fs.String("handler", "echo", "echo, sleep or exec (see above)")
	resume := fs.Bool("resume", false, "declare that the handler can continue a stream another node began (see above)")
	sleepMin := fs.Duration("sleep-min", 50*time.Millisecond, "sleep handler: the shortest sleep")
	sleepMax := fs.Duration("sleep-max", 500*time.Millisecond, "sleep handler: the longest sleep")
	sleepChunks := fs.Int("sleep-chunks", 5, "sleep handler: chunks sent over the sleep when the task streams")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.parse(args); err != nil {
		return err
	}

	cfg := sdk.NodeConfig{
		APIKey:         *apiKey,
		Name:           *name,
		Capabilities:   caps,
		Languages:      langs,
		MaxConcurrency: *maxConc,
		Version:        cmp.Or(*nodeVersion, version),
		Resume:         *resume,
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" || v == "" {
			return fmt.Errorf("--label %q must be KEY=VALUE, such as region=eu-west", l)
		}
		if cfg.Labels == nil {
			cfg.Labels = map[string]string{}
		}
		cfg.Labels[k] = v
	}
	var err error
	if cfg.URL, err = nodeWSURL(*rawURL); err != nil {
		return err
	}
	switch {
	case cfg.APIKey == "":
		return errors.New("--api-key is required (create one with: switchyard accounts create --name NAME)")
	case cfg.Name == "":
		return errors.New("--name is required: a name for this node, unique among the account's nodes")
	case len(cfg.Capabilities) == 0:
		return errors.New("at least one --capability is required: the task types this node serves, e.g. --capability chat")
	case *maxConc < 1:
		return fmt.Errorf("--max-concurrency must be at least 1, got %d", *maxConc)
	}
	if *modelInfo != "" {
		if err := json.Unmarshal([]byte(*modelInfo), &cfg.ModelInfo); err != nil {
			return fmt.Errorf(`--model-info must be a JSON object such as '{"model":"llama3"}': %v`, err)
		}
	}
	if cfg.Handler, err = nodeHandler(*handler, fs.Args(), *sleepMin, *sleepMax, *sleepChunks); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level must be debug, info, warn or error, got %q", *logLevel)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	printed := ""
	cfg.OnRegistered = func(id string) {
		// The id is derived from key and name, so it is printed once unless
		// the server says otherwise.
		if id != printed {
			fmt.Fprintf(stdout, "node_id=%s\n", id)
			printed = id
		}
	}

	node, err := sdk.NewNode(cfg)
	if err != nil {
		return err
	}
	return nodeExplain(node.Run(ctx))
}

// nodeWSURL accepts ws(s)://HOST:PORT/PATH, and completes http(s)://HOST:PORT
// and a missing path to the node WebSocket.
func nodeWSURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("--url %q must look like ws://HOST:PORT/ws/node", raw)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("--url %q must start with ws://, wss://, http:// or https://", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/ws/node"
	}
	return u.String(), nil
}

// nodeHandler builds the --handler; cmd is what followed "--".
func nodeHandler(kind string, cmd []string, sleepMin, sleepMax time.Duration, chunks int) (sdk.Handler, error) {
	if kind != "exec" && len(cmd) > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: a command is only used with --handler exec", cmd)
	}
	switch kind {
	case "echo":
		return handlers.Echo(), nil
	case "sleep":
		switch {
		case sleepMin < 0 || sleepMin > sleepMax:
			return nil, fmt.Errorf("--sleep-min (%v) must be between 0 and --sleep-max (%v)", sleepMin, sleepMax)
		case chunks < 0:
			return nil, fmt.Errorf("--sleep-chunks must not be negative, got %d", chunks)
		}
		return handlers.Sleep(sleepMin, sleepMax, chunks), nil
	case "exec":
		if len(cmd) == 0 {
			return nil, errors.New("--handler exec needs the command after --, e.g. switchyard node ... --handler exec -- python3 worker.py")
		}
		return handlers.Exec(cmd[0], cmd[1:]), nil
	}
	return nil, fmt.Errorf("--handler must be echo, sleep or exec, got %q", kind)
}

// nodeExplain adds what to do to the errors that stop a node for good.
func nodeExplain(err error) error {
	var re *sdk.RegistrationError
	switch {
	case errors.Is(err, sdk.ErrReplaced):
		return fmt.Errorf("%w: another node registered with the same --api-key and --name; give each node its own --name", err)
	case errors.As(err, &re) && re.Code == "auth_failed":
		return fmt.Errorf("%w; check --api-key (create one with: switchyard accounts create --name NAME)", err)
	case errors.As(err, &re) && re.Code == "invalid_registration":
		return fmt.Errorf("%w; check --name, --capability, --languages and --model-info", err)
	}
	return err
}
