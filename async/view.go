package async

import (
	"encoding/json"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// View is an async task as GET /api/v1/tasks/{id} answers it, and as its
// webhook carries it.
type View struct {
	TaskID           string     `json:"task_id"`
	Status           string     `json:"status"`
	TaskType         string     `json:"task_type"`
	Priority         int        `json:"priority"`
	Stream           bool       `json:"stream"`
	CreatedAt        time.Time  `json:"created_at"`
	StartedAt        *time.Time `json:"started_at"`
	FinishedAt       *time.Time `json:"finished_at"`
	ExpiresAt        *time.Time `json:"expires_at"`
	NodeID           *string    `json:"node_id"`
	Attempts         int        `json:"attempts"`
	Result           *string    `json:"result"`
	Error            *ErrorView `json:"error"`
	ProcessingTimeMs int64      `json:"processing_time_ms"`
	Usage            *UsageView `json:"usage"`
}

// ErrorView is why a task failed or was cancelled.
type ErrorView struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// UsageView is a task's token counts, as /api/v1/request answers them.
type UsageView struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Final reports whether a status never changes again.
func Final(status string) bool {
	switch status {
	case store.AsyncCompleted, store.AsyncFailed, store.AsyncCancelled:
		return true
	}
	return false
}

// ViewOf is the view of t.
func ViewOf(t store.AsyncTask) View {
	v := View{
		TaskID: t.ID, Status: t.Status, TaskType: t.TaskType, Priority: t.Priority, Stream: t.Stream,
		CreatedAt: t.CreatedAt.UTC(), StartedAt: utc(t.StartedAt), FinishedAt: utc(t.FinishedAt), ExpiresAt: utc(t.ExpiresAt),
		Attempts: t.Attempts, ProcessingTimeMs: t.ProcessingMs,
	}
	if t.NodeID != "" {
		v.NodeID = &t.NodeID
	}
	if Final(t.Status) && t.Status != store.AsyncCancelled || t.Result != "" {
		v.Result = &t.Result
	}
	if t.ErrorCode != "" {
		v.Error = &ErrorView{Code: t.ErrorCode, Message: t.ErrorMessage}
	}
	if t.Usage != nil {
		v.Usage = &UsageView{t.Usage.PromptTokens, t.Usage.CompletionTokens, t.Usage.PromptTokens + t.Usage.CompletionTokens}
	}
	return v
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// WebhookBody is what a task's webhook carries: its view, as GET
// /api/v1/tasks/{id} answers it.
func WebhookBody(t store.AsyncTask) ([]byte, error) { return json.Marshal(ViewOf(t)) }
