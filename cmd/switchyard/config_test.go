package main

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/server"
)

// Serve with no flags and no environment runs server.DefaultConfig: the
// flags are bound to it, not a copy of it.
func TestServeFlagDefaultsAreDefaultConfig(t *testing.T) {
	clearServeEnv(t)
	got, err := serveConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got.Logger == nil || got.Version != version {
		t.Errorf("serveConfig: Logger %v, Version %q; want a logger and %q", got.Logger, got.Version, version)
	}
	got.Logger, got.Version = nil, server.DefaultConfig().Version
	if want := server.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("serve with no flags builds\n%+v\nwant server.DefaultConfig()\n%+v", got, want)
	}

	// Flags write over the defaults, and "none" turns splitting off.
	got, err = serveConfig([]string{"--namespace", "blue", "--split-task-types", "none", "--multi-instance=false", "--node-benchmarks=false", "--pprof-listen", "127.0.0.1:6060"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "blue" || got.SplitTaskTypes == nil || len(got.SplitTaskTypes) != 0 || !got.SingleInstance || !got.NoNodeBenchmarks || got.PprofListen != "127.0.0.1:6060" {
		t.Errorf("serveConfig with flags = %+v", got)
	}
}

// clearServeEnv unsets every SWITCHYARD_ variable for the test, so the
// machine's environment cannot change what serve's flags default to.
func clearServeEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, envPrefix) {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
}

// helpFlag is one flag as `switchyard serve --help` prints it.
type helpFlag struct{ name, def string }

// serveHelp parses `switchyard serve --help` into its flags, in order.
func serveHelp(t *testing.T) []helpFlag {
	t.Helper()
	clearServeEnv(t)
	_, stderr, err := cli(t, "serve", "--help")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve --help: %v", err)
	}
	flagRE := regexp.MustCompile(`^  --([a-z0-9-]+)`)
	envRE := regexp.MustCompile(`^      env SWITCHYARD_[A-Z0-9_]+(?: \(default (.*)\))?$`)
	var flags []helpFlag
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		if m := flagRE.FindStringSubmatch(sc.Text()); m != nil {
			flags = append(flags, helpFlag{name: m[1]})
		} else if m := envRE.FindStringSubmatch(sc.Text()); m != nil && len(flags) > 0 {
			flags[len(flags)-1].def = m[1]
		}
	}
	if len(flags) < 20 {
		t.Fatalf("serve --help shows %d flags; the parser is wrong or the help changed:\n%s", len(flags), stderr)
	}
	return flags
}

// readmeTable reads README.md's configuration table: flag → default cell.
// A row may name several flags ("`--log-format`, `--log-level`") with as
// many defaults.
func readmeTable(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "| flag | default | what it does |\n| --- | --- | --- |\n")
	if !ok {
		t.Fatal("README.md has no configuration table (| flag | default | what it does |)")
	}
	rows := map[string]string{}
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "| `--") {
			break
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Fatalf("README.md: a malformed row %q", line)
		}
		names := strings.Split(strings.TrimPrefix(cells[0], "| "), ", ")
		defs := strings.Split(cells[1], ", ")
		if len(defs) != len(names) {
			defs = slices.Repeat([]string{cells[1]}, len(names)) // one default with a comma in it (2,000,000)
		}
		for i, n := range names {
			rows[strings.TrimPrefix(strings.Trim(n, "`"), "--")] = defs[i]
		}
	}
	return rows
}

// sameDefault reports whether README's cell says the same as the default
// --help prints, allowing README its friendlier spelling.
func sameDefault(readme, help string) bool {
	readme = strings.Trim(readme, "`")
	switch readme {
	case "—", "host name": // none; the host name is resolved at start
		return help == ""
	case "off":
		return help == "false"
	}
	if n, ok := strings.CutSuffix(readme, " MiB"); ok {
		v, err := strconv.ParseInt(n, 10, 64)
		return err == nil && strconv.FormatInt(v<<20, 10) == help
	}
	if d1, err := time.ParseDuration(readme); err == nil {
		d2, err := time.ParseDuration(help)
		return err == nil && d1 == d2
	}
	return strings.ReplaceAll(readme, ",", "") == help
}

// README's configuration table lists exactly serve's flags, with the
// defaults --help shows.
func TestHelpMatchesREADMEConfigTable(t *testing.T) {
	readme := readmeTable(t)
	seen := map[string]bool{}
	for _, f := range serveHelp(t) {
		seen[f.name] = true
		def, ok := readme[f.name]
		switch {
		case !ok:
			t.Errorf("README.md's configuration table lacks --%s (default %q)", f.name, f.def)
		case !sameDefault(def, f.def):
			t.Errorf("README.md says --%s defaults to %s; serve --help says %q", f.name, def, f.def)
		}
	}
	for name := range readme {
		if !seen[name] {
			t.Errorf("README.md's configuration table lists --%s, which serve does not have", name)
		}
	}
}
