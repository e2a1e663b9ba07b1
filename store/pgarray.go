package store

import (
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// The task history's batches go to PostgreSQL as one array per column
// (writeTasks, writeUsage). Given a []string or a []time.Time, pgx boxes
// every element into an interface to write the array in binary: an
// allocation per element, 15 % of the instance's allocations at 2,500
// tasks/s. These write the array as PostgreSQL's text literal instead,
// one allocation for the whole column; pgx sends a string parameter as
// text, and the server reads it as the statement's array type.

// pgTextArray is ss as a text[] literal: {"a","b\"c"}. Every element is
// quoted, so none reads as NULL; inside the quotes only " and \ are
// escaped. The strings hold no NUL (cleanText).
func pgTextArray(ss []string) string {
	n := 2
	for _, s := range ss {
		n += len(s) + 3 + strings.Count(s, `"`) + strings.Count(s, `\`)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for len(s) > 0 {
			j := strings.IndexAny(s, `"\`)
			if j < 0 {
				b.WriteString(s)
				break
			}
			b.WriteString(s[:j])
			b.WriteByte('\\')
			b.WriteByte(s[j])
			s = s[j+1:]
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// pgTimeLen is the length of a time as pgTimeArray writes it: the wire's
// timestamp (wire.AppendTimestamp), ISO 8601 in UTC to the microsecond
// (dbTime's precision), which timestamptz reads exactly.
const pgTimeLen = len("2006-01-02T15:04:05.000000Z")

// pgTimeArray is ts as a timestamptz[] literal.
func pgTimeArray(ts []time.Time) string {
	b := timeArrayBuilder(len(ts))
	for i, t := range ts {
		appendTime(b, i, &t)
	}
	b.WriteByte('}')
	return b.String()
}

// pgOptTimeArray is ts as a timestamptz[] literal, a nil time as NULL.
func pgOptTimeArray(ts []*time.Time) string {
	b := timeArrayBuilder(len(ts))
	for i, t := range ts {
		appendTime(b, i, t)
	}
	b.WriteByte('}')
	return b.String()
}

func timeArrayBuilder(n int) *strings.Builder {
	b := new(strings.Builder)
	b.Grow(2 + n*(pgTimeLen+1))
	b.WriteByte('{')
	return b
}

// appendTime writes the i-th element of a timestamptz[] literal.
func appendTime(b *strings.Builder, i int, t *time.Time) {
	if i > 0 {
		b.WriteByte(',')
	}
	if t == nil {
		b.WriteString("NULL")
		return
	}
	var buf [40]byte
	b.Write(wire.AppendTimestamp(buf[:0], *t))
}
