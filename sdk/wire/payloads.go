package wire

import "encoding/json"

// RegisterPayload is node_register, as a node sends it. The coordinator
// checks it by its own rules (nodes.DecodeRegister).
type RegisterPayload struct {
	APIKey       string         `json:"api_key"`
	Name         string         `json:"name"`
	Capabilities []string       `json:"capabilities"`
	Languages    []string       `json:"languages"`
	ModelInfo    map[string]any `json:"model_info"`
	// MaxConcurrency is ours; GemmaNet ignores it.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Features are the protocol extensions the node understands (ours;
	// GemmaNet ignores them), such as FeatureTaskCancel.
	Features []string `json:"features,omitempty"`
	// Version is the node software's version and Labels its labels (such
	// as region=eu-west), both ours and optional: shown in the node
	// listing, and a request may require labels (docs/PROTOCOL.md).
	Version string            `json:"version,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// RegisteredPayload is node_registered.
type RegisteredPayload struct {
	NodeID string `json:"node_id"`
}

// ErrorPayload is an `error` message; Code is one of the ErrorCodes. The
// HTTP API's error bodies have the same shape, with codes of their own.
type ErrorPayload struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// HeartbeatPayload is heartbeat: the load a node reports.
type HeartbeatPayload struct {
	NodeID      string  `json:"node_id"`
	ActiveTasks int     `json:"active_tasks"`
	CPUPercent  float64 `json:"cpu_percent"`
}

// TaskAssignPayload is task_assign. Params is the client's JSON object,
// passed through as it came.
type TaskAssignPayload struct {
	TaskID   string          `json:"task_id"`
	TaskType string          `json:"task_type"`
	Content  string          `json:"content"`
	Params   json.RawMessage `json:"params"`
	Stream   bool            `json:"stream"`
	// ResumeText (ours) is set only on a streaming assignment that
	// continues a stream another node began, and only for a node that
	// declared FeatureResume: the text the client already has (the deltas
	// delivered so far, joined). The node streams only what follows it,
	// and its result is only that continuation (docs/PROTOCOL.md,
	// Resumed streams).
	ResumeText string `json:"resume_text,omitempty"`
}

// TaskChunkPayload is task_chunk: one piece of a streaming task's result.
type TaskChunkPayload struct {
	TaskID string `json:"task_id"`
	Delta  string `json:"delta"`
}

// TaskResultPayload is task_result. Usage is null when the handler reports
// none.
type TaskResultPayload struct {
	TaskID string       `json:"task_id"`
	NodeID string       `json:"node_id"` // the coordinator ignores it: it knows the connection
	Status ResultStatus `json:"status"`
	Result string       `json:"result"`
	// ProcessingTimeMs is how long the handler took. DecodeTaskResult reads
	// an absent one as -1: the coordinator then uses its own measurement.
	ProcessingTimeMs int64  `json:"processing_time_ms"`
	Usage            *Usage `json:"usage"`
}

// Usage is the token count a handler may report; it reaches the API client
// unchanged.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// TaskCancelPayload is task_cancel (ours).
type TaskCancelPayload struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
}

// BenchmarkPayload is benchmark: prompts to answer, each with the handler.
type BenchmarkPayload struct {
	Prompts []string `json:"prompts"`
}

// BenchmarkResultPayload is benchmark_result.
type BenchmarkResultPayload struct {
	NodeID  string          `json:"node_id"`
	Results []BenchmarkItem `json:"results"`
}

// BenchmarkItem is the outcome of one benchmark prompt.
type BenchmarkItem struct {
	Prompt   string `json:"prompt"`
	Response string `json:"response"`
	TimeMs   int64  `json:"time_ms"`
	Success  bool   `json:"success"`
}
