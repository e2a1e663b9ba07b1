package tasks

import (
	"context"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-dev/switchyard/store"
)

// SplitParts is how many parts a split task is cut into (GemmaNet: 3).
const SplitParts = 3

// SplitContent cuts content into n parts the way GemmaNet does: by
// paragraphs (blank lines) when there are at least n, else by sentences,
// else by characters. Every part is non-empty when content has at least n
// characters.
func SplitContent(content string, n int) []string {
	if paras := strings.Split(content, "\n\n"); len(paras) >= n {
		return groups(paras, n, "\n\n")
	}
	if sents := strings.Split(strings.ReplaceAll(content, ". ", ".\n"), "\n"); len(sents) >= n {
		return groups(sents, n, " ")
	}
	runes := []rune(content)
	size := len(runes) / n
	out := make([]string, n)
	for i := range out {
		end := (i + 1) * size
		if i == n-1 {
			end = len(runes)
		}
		out[i] = string(runes[i*size : end])
	}
	return out
}

// groups joins items into n consecutive groups; the last takes the rest.
func groups(items []string, n int, sep string) []string {
	size := len(items) / n
	out := make([]string, n)
	for i := range out {
		end := (i + 1) * size
		if i == n-1 {
			end = len(items)
		}
		out[i] = strings.Join(items[i*size:end], sep)
	}
	return out
}

// MergeResults joins the parts' results in order, as GemmaNet does.
func MergeResults(parts []string) string {
	trimmed := make([]string, len(parts))
	for i, p := range parts {
		trimmed[i] = strings.TrimSpace(p)
	}
	return strings.Join(trimmed, "\n\n")
}

// runSplit runs a long task as SplitParts sub-tasks on up to SplitParts
// different nodes, in parallel, and joins their results in order. The task
// is recorded once, with every node that served a part; each node's part
// counts in its reputation. The first part to fail fails the task, and its
// siblings are cancelled on their nodes at once (their results could no
// longer be used).
func (d *dispatcher) runSplit(ctx context.Context, req Request, h Hooks) (Outcome, error) {
	start := time.Now()
	parts := SplitContent(req.Content, SplitParts)
	type partResult struct {
		out  Outcome
		node string
		att  int
	}
	results := make([]partResult, len(parts))
	var (
		mu       sync.Mutex
		chosen   []string
		assigned sync.Once
	)
	g, gctx := errgroup.WithContext(ctx)
	for i, part := range parts {
		if gctx.Err() != nil {
			break // a part failed (or the client left) before this one started
		}
		sub := req
		sub.TaskID = req.TaskID + "-" + string(rune('0'+i))
		sub.Content = part
		sub.Stream = false
		sub.subtask = true
		// Each part prefers a node the earlier ones did not take; it waits
		// until the part before it has one, so the choice is informed.
		picked := make(chan struct{})
		mu.Lock()
		sub.Avoid = append([]string(nil), chosen...)
		mu.Unlock()
		g.Go(func() error {
			var once sync.Once
			release := func() { once.Do(func() { close(picked) }) }
			defer release()
			out, err := d.run(gctx, sub, Hooks{}, func(nodeID string) {
				mu.Lock()
				chosen = append(chosen, nodeID)
				mu.Unlock()
				if h.Assigned != nil {
					assigned.Do(h.Assigned)
				}
				release()
			}, func(r *run) {
				results[i].att, results[i].node = r.attempts, r.nodeID
			})
			results[i].out = out
			return err
		})
		<-picked
	}
	firstErr := g.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = &Error{Code: CodeCanceled, Message: "the client went away"} // no part was started
	}

	rec := d.newRecord(&req, start)
	rec.NodeIDs = []string{}
	out := Outcome{TaskID: req.TaskID, Status: StatusCompleted, ProcessingMs: time.Since(start).Milliseconds()}
	texts := make([]string, len(parts))
	for i, r := range results {
		if r.node != "" {
			rec.NodeIDs = append(rec.NodeIDs, r.node)
		}
		rec.Attempts += r.att
		texts[i] = r.out.Result
		if r.out.Status != StatusCompleted {
			out.Status = StatusFailed
		}
		if r.out.Usage != nil {
			if out.Usage == nil {
				out.Usage = &store.Usage{}
			}
			out.Usage.PromptTokens += r.out.Usage.PromptTokens
			out.Usage.CompletionTokens += r.out.Usage.CompletionTokens
		}
	}
	if firstErr != nil {
		d.record(&rec, start, time.Now(), Outcome{}, firstErr)
		return Outcome{}, firstErr
	}
	out.Result = MergeResults(texts)
	d.record(&rec, start, time.Now(), out, nil)
	return out, nil
}
