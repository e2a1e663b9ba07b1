package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envPrefix is the prefix of every environment variable that sets a flag.
const envPrefix = "SWITCHYARD_"

// flagSet is a flag.FlagSet whose every flag can also be set from the
// environment: --database-url is SWITCHYARD_DATABASE_URL. A flag given on
// the command line wins over the environment.
type flagSet struct {
	*flag.FlagSet
	summary string // one paragraph printed above the flags by --help
}

func newFlagSet(name, summary string, stderr io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), summary: summary}
	fs.SetOutput(stderr)
	fs.Usage = fs.usage
	return fs
}

// envName is the environment variable that sets the flag called name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parse parses args, then fills every flag not given on the command line
// from its environment variable. A bad value names where it came from.
func (fs *flagSet) parse(args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", envName(f.Name), v, err))
		}
	})
	return errors.Join(errs...)
}

func (fs *flagSet) usage() {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: switchyard %s [flags]\n\n%s\n\nFlags (each can also be set by the environment variable shown):\n", fs.Name(), fs.summary)
	fs.VisitAll(func(f *flag.Flag) {
		name, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, strings.ReplaceAll(help, "\n", "\n      "))
		def := f.DefValue
		switch {
		case def == "" || def == "[]":
			fmt.Fprintf(w, "      env %s\n", envName(f.Name))
		default:
			fmt.Fprintf(w, "      env %s (default %s)\n", envName(f.Name), def)
		}
	})
}

// stringList is a repeatable flag (--capability a --capability b), also
// settable from the environment as a comma-separated list.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
