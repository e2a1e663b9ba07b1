package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// GemmaNet's own Python node SDK against a cluster of two instances: the
// nodes on A, the requests on B. Opt-in, as the SDK is not ours to ship:
// SWITCHYARD_GEMMANET_SDK is a PYTHONPATH under which `gemmanet.sdk.node`
// imports (with pydantic 2, websockets and their dependencies), and
// SWITCHYARD_GEMMANET_PYTHON the interpreter (default python3). README,
// "Testing", says how to set one up.
//
//   - A node is routable from every instance once GemmaNet's SDK has its
//     node_registered: each of ten nodes, each with a task type of its own,
//     is asked for through B at the moment it logs its registration.
//   - A client that gives up cancels its task, and the SDK, which knows no
//     task_cancel, is never sent one: it never logs "Failed to parse
//     message".
func TestGemmaNetSDK(t *testing.T) {
	sdkPath := os.Getenv("SWITCHYARD_GEMMANET_SDK")
	if sdkPath == "" {
		t.Skip("SWITCHYARD_GEMMANET_SDK is not set (the PYTHONPATH of GemmaNet's SDK; README, Testing)")
	}
	OnEachRedis(t, func(t *testing.T, cfg Config) { testGemmaNetSDK(t, cfg, sdkPath) })
}

// gemmaNode is the script each GemmaNet node runs: an async handler that
// waits `sleep` seconds, then echoes.
const gemmaNode = `import asyncio, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
from gemmanet.sdk.node import Node

async def echo(content, sleep=0, **params):
    await asyncio.sleep(float(sleep))
    return "echo: " + content

url, name, caps = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
node = Node(name=name, capabilities=caps, coordinator_url=url)
for c in caps:
    node.register_handler(c, echo)
node.start()
`

type gemmaProc struct {
	mu  sync.Mutex
	log bytes.Buffer
}

func (p *gemmaProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *gemmaProc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startGemmaNode starts one GemmaNet node process and returns its log.
func startGemmaNode(t *testing.T, sdkPath, script, url, key, name, caps string) *gemmaProc {
	t.Helper()
	python := os.Getenv("SWITCHYARD_GEMMANET_PYTHON")
	if python == "" {
		python = "python3"
	}
	p := &gemmaProc{}
	cmd := exec.Command(python, script, url, name, caps)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdkPath, "GEMMANET_API_KEY="+key, "PYTHONUNBUFFERED=1")
	cmd.Stdout, cmd.Stderr = p, p
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting GemmaNet's node (%s): %v", python, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("GemmaNet node %s's log:\n%s", name, p.String())
		}
	})
	return p
}

func testGemmaNetSDK(t *testing.T, cfg Config, sdkPath string) {
	c := New(t, cfg)
	key := c.Account("gemma")
	a := c.Start("A", "--max-nodes-per-account", "20")
	b := c.Start("B", "--max-nodes-per-account", "20")
	script := filepath.Join(t.TempDir(), "gemma_node.py")
	if err := os.WriteFile(script, []byte(gemmaNode), 0o600); err != nil {
		t.Fatal(err)
	}

	// Routable at once: the request goes out on B the moment the SDK says
	// it is registered on A.
	var logs []*gemmaProc
	for i := range 10 {
		taskType := fmt.Sprintf("only-%d", i)
		p := startGemmaNode(t, sdkPath, script, a.WS(), key, fmt.Sprintf("gn-%d", i), taskType)
		logs = append(logs, p)
		Eventually(t, 30*time.Second, 10*time.Millisecond, func() (bool, string) {
			return strings.Contains(p.String(), "Registered as"), "GemmaNet node gn-" + fmt.Sprint(i) + " registered"
		})
		resp, err := b.Request(context.Background(), key, taskType, "hi")
		if err != nil || resp.Code != http.StatusOK || !strings.Contains(string(resp.Body), "echo: hi") {
			t.Fatalf("request %d on B right after node_registered on A: %v %v", i, resp, err)
		}
	}

	// The client gives up after 300 ms on a task of 2 s: the task is
	// cancelled, the node finishes it, and its result is dropped.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := b.Do(ctx, http.MethodPost, "/api/v1/request", key,
		map[string]any{"task_type": "only-0", "content": "slow", "params": map[string]any{"sleep": 2}})
	cancel()
	if err == nil {
		t.Fatal("a request for a 2 s task came back within 300 ms")
	}
	received := regexp.MustCompile(`Received task (\S+) \(type=only-0\)`)
	var taskID string
	Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		m := received.FindAllStringSubmatch(logs[0].String(), -1)
		if len(m) < 2 { // the first is the routing check's
			return false, "the node received the slow task"
		}
		taskID = m[len(m)-1][1]
		return true, ""
	})
	Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		var rec struct {
			Status string `json:"status"`
		}
		r, err := b.Do(context.Background(), http.MethodGet, "/api/v1/tasks/"+taskID, key, nil)
		if err == nil && r.Code == http.StatusOK {
			_ = r.Decode(&rec)
		}
		return rec.Status == "canceled", fmt.Sprintf("task %s recorded canceled (status %q)", taskID, rec.Status)
	})
	Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		return strings.Contains(logs[0].String(), "Task "+taskID+" completed"), "the node finished the cancelled task"
	})
	// The node still serves, and the answer to it came after the dropped result.
	if resp, err := b.Request(context.Background(), key, "only-0", "again"); err != nil || resp.Code != http.StatusOK {
		t.Fatalf("request after the cancel: %v %v", resp, err)
	}
	for i, p := range logs {
		if s := p.String(); strings.Contains(s, "Failed to parse message") || strings.Contains(s, "ERROR") {
			t.Fatalf("GemmaNet node gn-%d logged an error:\n%s", i, s)
		}
	}
}
