package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/loadtest/internal/load"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/sweep"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitPass  = 0 // every criterion held
	exitFail  = 1 // a criterion failed
	exitError = 2 // the run could not be carried out, or bad usage
)

// outputs are where the report goes besides stdout.
type outputs struct {
	json, html string
	quiet      bool
	cpuProfile string // the load test's own CPU profile (its clients and nodes)
}

func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == fleet.HelperArg { // a helper process of the fleet profile
		if err := fleet.RunHelper(args[1], os.Stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return exitError
		}
		return exitPass
	}
	if len(args) == 1 && args[0] == sweep.FloorServerArg { // the sweep's floor mode (internal/sweep/floor.go)
		if err := sweep.RunFloorServer(os.Stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return exitError
		}
		return exitPass
	}
	cfg, out, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitPass
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return exitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if out.cpuProfile != "" {
		f, err := os.Create(out.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "loadtest: --cpuprofile:", err)
			return exitError
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	var progress io.Writer = stderr
	if out.quiet {
		progress = nil
	}
	rep, err := load.Run(ctx, cfg, progress)
	if rep != nil && (len(rep.Runs) > 0 || rep.Sweep != nil || rep.Burst != nil) {
		if werr := writeOutputs(rep, out, stdout); werr != nil {
			fmt.Fprintln(stderr, "loadtest:", werr)
			return exitError
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return exitError
	}
	if rep.LogDir != "" {
		fmt.Fprintf(stdout, "instance logs: %s\n", rep.LogDir)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "loadtest: interrupted")
		return exitError
	}
	if !rep.Pass {
		return exitFail
	}
	return exitPass
}

func writeOutputs(rep *report.Report, out outputs, stdout io.Writer) error {
	rep.WriteText(stdout)
	write := func(path string, f func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			_ = fh.Close()
			return err
		}
		return fh.Close()
	}
	if err := write(out.json, rep.WriteJSON); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := write(out.html, rep.WriteHTML); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}
