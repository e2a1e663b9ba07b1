package tasks

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	segjson "github.com/segmentio/encoding/json"

	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
)

// A node charges no more than it handled (invariant 18). The tokens a
// node reports in task_result's usage are what the client is told, what
// its key's quotas and budgets spend, and what the usage history counts,
// for a task any account's node may run: believed as sent, a node of one
// account could charge another's key 2^31 tokens for a one-byte request.
// So the owner, where the node's answer arrives, holds each report to what
// the node handled before anyone sees it (owner.charge): the requester
// believes the clamped figures it is sent, and the owner's usage report
// carries the same ones, so the answer, the quota and the history agree.
//
// A token is at least one byte, so a report is held to:
//
//   - prompt tokens: the bytes the node was sent for the task, its
//     task_assign's content and params;
//   - completion tokens: the bytes it returned that the client got (a
//     stream's deltas together, or the result when it streamed none), and
//     the request's max_tokens when it set one, whichever is smaller.
//
// What is cut off is counted (switchyard_tasks_usage_clamped_total), and a
// report far past what the node handled is held against its standing
// (usageSlack, nodes.Session.UsageReported).

// usageSlack is how far past its bytes a report may go and still be taken
// for an honest one, though it is clamped all the same: only a report
// beyond it is implausible, held against its node's standing. Honest nodes
// count tokens the coordinator did not send: a chat template's markers, a
// system prompt of the node's own. Those are a fixed overhead per task,
// and a requester controls the bytes it sends, so one sending one-byte
// requests would make any such node look dishonest if the overhead were
// not allowed for; 4,096 tokens covers templates and a sizeable system
// prompt, and no honest node reports 2^31. The request's max_tokens is no
// part of this judgement, only of the clamp: a requester sets it, and a
// node that does not read params (GemmaNet's SDK handlers) ignores it, so
// any account could make such nodes look dishonest with max_tokens 1.
// With the bytes alone and this slack, no request can make an honest
// node's report implausible, and what one account sends cannot get another
// account's node quarantined (nor could one account alone: the run must
// span two, as for failures). A node that counts tokens it never returns
// (a reasoning model's hidden thinking) is charged for what it returned,
// and past the slack judged as over-reporting: usage, in this protocol,
// counts what was sent and returned (docs/PROTOCOL.md).
const usageSlack = 4096

// noMaxTokens is handled.maxTokens for a request that set none.
const noMaxTokens = -1

// handled is what a node was sent and returned for one task, in bytes,
// and the request's max_tokens: what its usage report is held to.
type handled struct {
	sent      int64 // the task_assign's content and params
	returned  int64 // what the client got of the answer
	maxTokens int64 // noMaxTokens when the request set none
}

// clamped is a usage report held to what its node handled.
type clamped struct {
	usage store.Usage // what the client is told and charged, and the history counts
	// promptCut and completionCut are the tokens cut off; byMax says the
	// completion was cut to the request's max_tokens, below the bytes.
	promptCut, completionCut int64
	byMax                    bool
	// implausible, when not "", says why the report is held against its
	// node's standing: it went past the bytes by more than usageSlack.
	implausible string
}

// clampUsage holds u to h. A negative count is 0.
func clampUsage(u wire.Usage, h handled) clamped {
	prompt, completion := max(int64(u.PromptTokens), 0), max(int64(u.CompletionTokens), 0)
	var c clamped
	c.usage.PromptTokens = min(prompt, h.sent)
	c.promptCut = prompt - c.usage.PromptTokens
	bound := h.returned
	if h.maxTokens != noMaxTokens {
		bound = min(bound, h.maxTokens)
	}
	c.usage.CompletionTokens = min(completion, bound)
	c.completionCut = completion - c.usage.CompletionTokens
	c.byMax = c.completionCut > 0 && bound < h.returned
	switch {
	case prompt > h.sent+usageSlack:
		c.implausible = "reported " + strconv.FormatInt(prompt, 10) + " prompt tokens for " + strconv.FormatInt(h.sent, 10) + " bytes sent"
	case completion > h.returned+usageSlack:
		c.implausible = "reported " + strconv.FormatInt(completion, 10) + " completion tokens for " + strconv.FormatInt(h.returned, 10) + " bytes returned"
	}
	return c
}

// maxTokensKey finds the params key a request's max_tokens is read from
// (the OpenAI routes put theirs there). Without its opening quote: a
// search led by '"', in JSON, stops at every string and took twenty times
// as long (BenchmarkMaxTokensOf).
var maxTokensKey = []byte(`max_tokens"`)

// MaxTokens is the max_tokens of a task's params as the clamp reads it
// (maxTokensOf), and whether they name one: what a limited key's request
// holds for its completion, so that the hold is what the node may charge.
func MaxTokens(params []byte) (int64, bool) {
	n := maxTokensOf(params)
	return n, n != noMaxTokens
}

// maxTokensOf is the max_tokens of a task's params (a JSON object): the
// value of its top-level key "max_tokens", spelled so, when that is a whole
// number of at least 0, the last one when the key repeats (as the readers
// a node is written with take it); noMaxTokens otherwise. A key spelled
// with escapes alone is not seen: a request that hides its own max_tokens
// only loses the bound on its own charge. Params without the key, the
// common case, cost a scan; with it, segmentio's reader (nodes.Wire's)
// reads them, on every assign of an OpenAI request that sets it: about
// 0.5 µs for a 2 KiB conversation, where encoding/json's Decoder took
// 40 µs (BenchmarkMaxTokensOf).
func maxTokensOf(params []byte) int64 {
	if !bytes.Contains(params, maxTokensKey) {
		return noMaxTokens
	}
	var p struct {
		MaxTokens json.RawMessage `json:"max_tokens"`
	}
	rest, err := segjson.Parse(params, &p, segjson.DontMatchCaseInsensitiveStructFields|segjson.DontCopyRawMessage)
	if err != nil || len(rest) != 0 || p.MaxTokens == nil {
		return noMaxTokens
	}
	return wholeNumber(p.MaxTokens)
}

// wholeNumber is v when it is a JSON number with no fraction, at least 0
// (at most 2^53: past that, no bound anyone meant), else noMaxTokens.
func wholeNumber(v json.RawMessage) int64 {
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f < 0 || f != math.Trunc(f) {
		return noMaxTokens
	}
	return int64(min(f, 1<<53))
}
