package live

import (
	"fmt"
	"io"
	"os"
)

// Printer prints progress lines to w: in place on a terminal, else one a
// line. A Printer of a nil writer prints nothing.
type Printer struct {
	w   io.Writer
	tty bool
}

// NewPrinter prints to w (nil: nowhere).
func NewPrinter(w io.Writer) *Printer {
	return &Printer{w: w, tty: w != nil && IsTerminal(w)}
}

// Line prints one progress line.
func (p *Printer) Line(s string) {
	switch {
	case p.w == nil:
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s", s)
	default:
		fmt.Fprintln(p.w, s)
	}
}

// End ends a run of in-place lines on a terminal, so that what is printed
// next starts a line of its own.
func (p *Printer) End() {
	if p.w != nil && p.tty {
		fmt.Fprintln(p.w)
	}
}

// IsTerminal reports whether w is a terminal, where progress lines are
// rewritten in place.
func IsTerminal(w io.Writer) bool {
	fi, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := fi.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
