package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

const nodesUsage = `Usage:
  switchyard nodes list [flags]
  switchyard nodes pause|resume|drain [flags] NODE_ID

Lists the cluster's nodes, or changes one node's state, through any running
instance (--url). A paused node takes no new task (requests go to its other
nodes of the same type, or wait for a slot) and finishes what it runs; resume
undoes it; drain pauses it, then closes its connection with 1001 once it is
idle. Pausing, resuming or draining takes an unrestricted --api-key of the
node's own account (one set with neither --use nor --task-types: switchyard keys
set-limits) or the server's --admin-token; list shows the node's instance and account too with
--admin-token.`

func runNodes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintln(stdout, nodesUsage)
		return nil
	}
	verb, args := args[0], args[1:]
	switch verb {
	case "list", "pause", "resume", "drain":
	default:
		fmt.Fprintln(stderr, nodesUsage)
		return fmt.Errorf("unknown nodes command %q: use list, pause, resume or drain", verb)
	}
	fs := newFlagSet("nodes "+verb, nodesUsage, stderr)
	url := fs.String("url", localURL("http", ""), "a running instance's base URL")
	token := fs.String("admin-token", "", "the server's --admin-token")
	key := fs.String("api-key", "", "an unrestricted API key of the node's account (not a node or client key)")
	reason := fs.String("reason", "", "pause and drain: why, shown to operators (200 characters at most)")
	asJSON := fs.Bool("json", false, "print the server's JSON answer")
	if err := fs.parse(args); err != nil {
		return err
	}
	var id string
	if verb != "list" {
		if fs.NArg() == 0 {
			return fmt.Errorf("nodes %s needs the NODE_ID (switchyard nodes list shows them)", verb)
		}
		id = fs.Arg(0)
		if err := fs.FlagSet.Parse(fs.Args()[1:]); err != nil { // flags after the id
			return err
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	bearer := *token
	if bearer == "" {
		bearer = *key
	}
	base := strings.TrimRight(*url, "/")
	client := &http.Client{Timeout: 10 * time.Second}
	if verb == "list" {
		return listNodes(ctx, client, base, *token, *asJSON, stdout)
	}
	if bearer == "" {
		return fmt.Errorf("nodes %s needs --api-key (the node's account) or --admin-token", verb)
	}
	body, _ := json.Marshal(map[string]string{"reason": *reason})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/nodes/"+id+"/"+verb, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w (is the server running? set --url)", base, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if *asJSON {
		_, err := stdout.Write(append(raw, '\n'))
		return err
	}
	var ans struct {
		State string `json:"state"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &ans)
	switch resp.StatusCode {
	case http.StatusOK:
		fmt.Fprintf(stdout, "node %s is %s\n", id, ans.State)
	case http.StatusAccepted:
		fmt.Fprintf(stdout, "node %s: %s sent to the instance that holds it (switchyard nodes list shows its state)\n", id, verb)
	default:
		if ans.Error.Message != "" {
			return fmt.Errorf("%s %s: HTTP %d %s: %s", verb, id, resp.StatusCode, ans.Error.Code, ans.Error.Message)
		}
		return fmt.Errorf("%s %s: HTTP %d", verb, id, resp.StatusCode)
	}
	return nil
}

// listNodes prints the nodes: the operators' listing with the admin token,
// else the public one.
func listNodes(ctx context.Context, client *http.Client, base, token string, asJSON bool, stdout io.Writer) error {
	path := "/api/v1/nodes"
	if token != "" {
		path = "/admin/api/nodes"
	}
	var list []struct {
		NodeID         string   `json:"node_id"`
		Name           string   `json:"name"`
		State          string   `json:"state"`
		StateReason    string   `json:"state_reason"`
		ActiveTasks    int      `json:"active_tasks"`
		MaxConcurrency int      `json:"max_concurrency"`
		Capabilities   []string `json:"capabilities"`
		Instance       string   `json:"instance"`
		AccountID      string   `json:"account_id"`
	}
	code, err := getJSON(ctx, client, base+path, token, &list)
	switch {
	case err != nil && code == 0:
		return fmt.Errorf("cannot reach %s: %w (is the server running? set --url)", base, err)
	case code == http.StatusNotFound && token != "":
		return fmt.Errorf("%s has no admin routes: start it with --admin-token", base)
	case err != nil || code != http.StatusOK:
		return fmt.Errorf("%s%s: HTTP %d (with --admin-token: is it the server's?)", base, path, code)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	head := "NODE_ID\tNAME\tSTATE\tTASKS\tCAPABILITIES"
	if token != "" {
		head += "\tINSTANCE\tACCOUNT"
	}
	fmt.Fprintln(w, head)
	for _, n := range list {
		state := n.State
		if n.StateReason != "" {
			state += " (" + n.StateReason + ")"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%d/%d\t%s", n.NodeID, n.Name, state, n.ActiveTasks, n.MaxConcurrency, strings.Join(n.Capabilities, ","))
		if token != "" {
			line += "\t" + n.Instance + "\t" + n.AccountID
		}
		fmt.Fprintln(w, line)
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "(no node online)")
	}
	return w.Flush()
}
