package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `switchyard — a task coordinator for fleets of workers.

Usage:
  switchyard [serve] [flags]       run an instance (the default command)
  switchyard node [flags]          run a ready-made worker node (echo, sleep or exec)
  switchyard accounts create ...   create an account and its first API key
  switchyard keys create|list|revoke ...
                                   manage API keys
  switchyard migrate [flags]       apply database migrations and exit
  switchyard dead-letters [flags]  list the records the database refused and the writer set aside
  switchyard status [flags]        print a server's status and health
  switchyard healthcheck [flags]   exit 0 if the server on this host is ready (for containers)
  switchyard nodes list|pause|resume|drain ...
                                   list the cluster's nodes; pause, resume or drain one
  switchyard version               print the version

Run "switchyard COMMAND --help" for a command's flags. Every flag can also be
set with an environment variable: --database-url is SWITCHYARD_DATABASE_URL.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "switchyard:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand. It never exits the process, so tests can
// call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (isHelp(args[0]) || len(args[0]) > 0 && args[0][0] != '-') {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "node":
		return runNode(ctx, args, stdout, stderr)
	case "accounts":
		return runAccounts(ctx, args, stdout, stderr)
	case "keys":
		return runKeys(ctx, args, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, args, stdout, stderr)
	case "dead-letters":
		return runDeadLetters(ctx, args, stdout, stderr)
	case "status":
		return runStatus(ctx, args, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args, stdout, stderr)
	case "nodes":
		return runNodes(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version)
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// isHelp reports whether arg asks for help, as the flag package understands it.
func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help"
}
