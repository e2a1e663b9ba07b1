package tasks

import (
	"context"
	"strings"
	"sync"
	"time"

	"switchyard/store"
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

// RunSplit runs a long task as SplitParts sub-tasks on up to SplitParts
// different nodes, in parallel, and joins their results in order. The task
// is recorded once, with every node that served a part; each node's part
// counts in its reputation. The first error of any part is the task's.
func (d *Dispatcher) RunSplit(ctx context.Context, req Request, h Hooks) (Outcome, error) {
	start := time.Now()
	parts := SplitContent(req.Content, SplitParts)
	type partResult struct {
		out   Outcome
		err   error
		nodes []string
		att   int
	}
	results := make([]partResult, len(parts))
	var (
		mu       sync.Mutex
		chosen   []string
		assigned sync.Once
		wg       sync.WaitGroup
	)
	for i, part := range parts {
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			release := func() { once.Do(func() { close(picked) }) }
			defer release()
			out, err := d.run(ctx, sub, Hooks{}, func(nodeID string) {
				mu.Lock()
				chosen = append(chosen, nodeID)
				mu.Unlock()
				if h.Assigned != nil {
					assigned.Do(h.Assigned)
				}
				release()
			}, func(r *run) {
				results[i].att = r.attempts
				if r.nodeID != "" {
					results[i].nodes = []string{r.nodeID}
				}
			})
			results[i].out, results[i].err = out, err
		}()
		<-picked
	}
	wg.Wait()

	out := Outcome{TaskID: req.TaskID, Status: store.StatusCompleted, ProcessingMs: time.Since(start).Milliseconds()}
	rec := store.TaskRecord{
		ID: req.TaskID, AccountID: req.AccountID, TaskType: req.TaskType, Stream: req.Stream,
		Requester: d.cfg.Instance, CreatedAt: start.UTC(), ContentBytes: int64(len(req.Content)), NodeIDs: []string{},
	}
	texts := make([]string, len(parts))
	var firstErr error
	for i, r := range results {
		rec.NodeIDs = append(rec.NodeIDs, r.nodes...)
		rec.Attempts += r.att
		if r.err != nil {
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		texts[i] = r.out.Result
		if r.out.Status != store.StatusCompleted {
			out.Status = "failed"
		}
		if r.out.Usage != nil {
			if out.Usage == nil {
				out.Usage = &store.Usage{}
			}
			out.Usage.PromptTokens += r.out.Usage.PromptTokens
			out.Usage.CompletionTokens += r.out.Usage.CompletionTokens
		}
	}
	rec.FinishedAt = time.Now().UTC()
	mode := "plain"
	if req.Stream {
		mode = "stream"
	}
	d.metrics.latency.WithLabelValues(mode).Observe(time.Since(start).Seconds())
	if firstErr != nil {
		e := AsError(firstErr)
		rec.Status, rec.ErrorCode = store.StatusError, e.Code
		if e.Code == CodeCanceled {
			rec.Status = store.StatusCanceled
		}
		d.metrics.outcomes.WithLabelValues(e.Code).Inc()
		d.rec.RecordTask(rec)
		return Outcome{}, firstErr
	}
	d.metrics.outcomes.WithLabelValues(out.Status).Inc()
	out.Result = MergeResults(texts)
	rec.Status, rec.ProcessingMs, rec.ResultBytes = out.Status, out.ProcessingMs, int64(len(out.Result))
	if out.Usage != nil {
		rec.Usage = *out.Usage
	}
	d.rec.RecordTask(rec)
	return out, nil
}
