package main

import (
	"flag"
	"fmt"
	"io"
)

// usage is --help: what the load test does, its criteria, its profiles,
// then every flag with the chosen profile's defaults.
func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, `Usage: loadtest [--profile seed|smoke|fleet|sweep|burst] [flags]

Replays switchyard's scaling profile (the seed profile) and judges it
against our bars, the criteria below (docs/BENCHMARKS.md has each
profile's runs). For each instance count in --instances (1, then 2, then 3) it
starts that many instances of the switchyard binary on free loopback ports,
sharing --redis-url (a fresh namespace) and --database-url (a fresh schema),
or, with --target, uses the first N of the given running instances. With
--redis-cluster it first starts a Redis Cluster of its own (3 masters:
redis-server processes on free loopback ports below 50000, no persistence,
stopped and removed at exit, also on Ctrl-C) and runs every instance with
--redis-cluster on it. Then:

  nodes    --nodes simulated nodes (the Go SDK), node i on instance i mod N,
           connecting --connect-rate a second; handlers sleep
           --handler-min..--handler-max (sdk/handlers.Sleep) and report that
           as processing_time_ms
  ramp     closed-loop clients grow to --ramp-to concurrent requests over --ramp
  steady   --rate plain requests/s for --duration, open loop, round robin over
           the instances and over several API keys, with --streams concurrent
           streams of --stream-seconds alongside
  fault    at --fault-at, kill -9 (--fault kill) or SIGTERM (--fault sigterm)
           one instance; the clients stop sending to it (as a load balancer
           would) and its nodes reconnect to the others

The fleet profile (the same bars at fleet scale) has another shape: once every
node has registered and every instance lists them all, and --settle has
passed, an idle window of --idle with no requests at all, then a loaded
window of --rate short plain requests/s for --duration (the steady phase;
no ramp, streams or fault unless asked, and never a fault). For each window
it reports every instance's CPU (% of one core: its CPU time over the
window from /proc, divided by the window's length) and RSS, the busiest
instance, the load test's own CPU, and Redis commands/s (INFO stats
total_commands_processed, end minus start, summed over every server: the
single Redis, or every master and replica of the cluster). A Redis this
program did not start (the default 127.0.0.1:6379) may carry other clients'
traffic: it is counted too, and the report says so.

The sweep profile measures switchyard against an embedded NATS
baseline. Its --modes run one after another, each with --nodes echo
workers that answer with the request's content at once:
  nats     an embedded nats-server (random loopback port, no logging);
           the workers are queue-group subscribers, each on its own
           connection; every request goes out on one shared client
           connection (nc.RequestWithContext)
  floor    the same SDK client and echo nodes as local, through a bare
           forwarder in a process of this binary (HTTP/1.1 in, one
           WebSocket round trip to a node with a free slot, JSON; no
           accounts, limits, records, metrics or cluster): what any
           coordinator of this protocol costs on this machine, so what
           local adds over it is switchyard's own
  local    one instance; SDK echo nodes (--node-concurrency slots each)
           on it, and the requests sent to it
  cross    two instances sharing Redis and PostgreSQL; every node on the
           first, every request sent to the second
For each rate of --rates (rising), a step: 1 s at that rate that is not
counted, then --duration counted. Open loop: request i is due at
start + i/rate and goes out then from its own goroutine, whatever the
others are doing; its latency counts from that due time to its answer, so
a generator that falls behind cannot hide the wait (no coordinated
omission). A request that went out more than 10 ms after its due time is
late. Every request ends ok, with an error (and its status), or as a
timeout (no answer by --task-timeout plus --grace). The echo takes no
time, so the latency is the overhead. The report has a row per mode and
rate (sent, ok, errors, timeouts, late, worst lag, p50/p95/p99, the p99
over the NATS p99 at that rate, the most requests in flight, the HTTP
connections dialled), and per mode the first rate whose p99 passes 10 ms.
Its headline table is the CPU time of each process (the instances, the
floor's forwarder, Redis, PostgreSQL, the load test; /proc over the
counted window) per ok request, beside p50/p95/p99; in the local and
cross modes, the instances' heap allocations per ok request over the
window too (go_memstats_mallocs_total: steadier than CPU time on a shared
machine; at low rates the instances' own background work and the two
/metrics reads weigh in it), and the Redis commands per ok request
(INFO commandstats, every server; the PUBLISHes among them are the cross
mode's bus hops).
When a step had as many requests in flight as the nodes have slots, the
slots may be its limit: the report says so.

The burst profile measures registration under a burst: --nodes nodes
connect at once (not paced) to one fresh instance, twice.
  sdk      Go SDK nodes (sdk.Node with its default backoff, 1–60 s), which
           wait out the retry_after_ms of a shed registration's close 1013;
           timed until every one has registered and the instance lists
           them all (GET /api/v1/nodes)
  naive    on another fresh instance, as many naive clients: node_register,
           and on a refusal or a drop a new connection at once (no backoff,
           no hint); counted after --duration
For each: how many registered, when the last did, the 50th/90th/99th
percentile of the nodes' first registrations, how many the instance
listed, and the registrations it shed with 1013 (its
switchyard_nodes_handshake_rejections_total{reason="busy"}).

Every node is an open socket in this process and one in its instance: the
load test raises its RLIMIT_NOFILE to the hard limit (the instances inherit
it) and refuses a --nodes that cannot fit under it (ulimit -Hn).

Every request is recorded with exactly one outcome: a result, an explicit
error with its code, or LOST (nothing by its deadline plus --grace).

Criteria (our bars), judged per run; exit status 0 only if none
fails (a SKIP, e.g. the fault on 1 instance, does not fail):
  lost tasks                 0, and every request has exactly one outcome
  hop adds at p95 / p99      overhead (latency − processing_time_ms) percentile
                             minus the 1-instance run's: ≤ 2 ms / ≤ 5 ms
  CPU per instance           mean over the steady phase < 15% of one core at
                             100 requests/s (scaled: cpu% × 100/rate)
  memory over steady phase   RSS growth < 3% (mean of the last fifth vs the
                             first fifth of each stretch without a fault, of
                             at least --mem-min-stretch; shorter: SKIP)
  killed instance's tasks    tasks running on its nodes for other instances'
                             requests get 502 node_disconnected within 1.5 s
  drain loses nothing        (--fault sigterm) its in-flight requests succeed
  other tasks unaffected     every other request succeeds
  instances stay up          no instance exits unless signalled
The fleet profile judges instead:
  idle CPU per instance      the busiest instance < 5% of one core over the
                             idle window (--bar-idle-cpu)
  idle Redis commands/s      < 3,000 over the idle window, every server
                             together (--bar-idle-redis)
  lost tasks, other tasks unaffected, instances stay up   as above, for the
                             loaded window's requests (each gets exactly one
                             outcome, and succeeds)
The loaded window's CPU and Redis figures are reported, not judged.
The sweep profile judges instead (a SKIP when its mode or rate,
or the NATS step it compares with, did not run):
  local p99 vs NATS          at 5000/s: ≤ 2× the NATS p99 (--bar-sweep-local);
                             the floor's p99 at the same rate is shown beside
                             it (a bar under the floor's is out of reach here)
  cross p99 vs NATS          at 2500/s: ≤ 3× the NATS p99 (--bar-sweep-cross)
  cross on schedule          at 5000/s: 0 late, 0 errors, 0 timeouts
  every request one outcome, instances stay up   as above
  A p99 leaves out requests that were not ok; a step where more than 1 %
  were not fails its p99 bar (and is its mode's knee).
The burst profile judges only the SDK's nodes:
  burst: every SDK node in   all --nodes registered and listed (none
                             registering for 60 s ends the wait); the naive
                             client's count is the comparison, not judged

Output: a progress line on stderr every second (while the nodes connect:
how many have registered), a table on stdout, --json and --html reports.
The header names the Redis the run used. Exit status: 0 pass, 1 a criterion
failed, 2 the run could not be carried out (bad usage, an instance that
would not start, Redis or PostgreSQL unreachable, more nodes than open
files allow, interrupted).

Profiles (flags override them):
  seed   instances 1,2,3; 200 nodes; handlers 50ms–500ms; ramp to 200 over
         30s; 100 requests/s for 10m; 50 streams of 5s; kill mid-run
  smoke  instances 1,2; 40 nodes; handlers 50ms–500ms; ramp to 40 over 3s;
         50 requests/s for 15s; 10 streams of 2s; kill mid-run
  fleet  instances 1,2,3; 10,000 nodes connecting 500/s; idle 60s; then
         100 requests/s for 60s, handlers 10ms–50ms; no fault
  sweep  modes nats,floor,local,cross; rates 1000,2500,5000,10000; 20 echo
         workers; each step 1s warm-up + 10s; task timeout 10s
  burst  instance 1; 9,000 nodes at once, the Go SDK's, then a naive
         client's for 60s

Examples:
  loadtest --profile smoke --html smoke.html
  loadtest --profile seed --json seed.json --html seed.html
  loadtest --profile smoke --fault sigterm
  loadtest --profile smoke --redis-cluster
  loadtest --profile fleet --instances 3 --nodes 9000 --json fleet.json
  loadtest --profile fleet --redis-cluster --nodes 1000 --idle 20s --duration 20s
  loadtest --profile sweep --json sweep.json
  loadtest --profile sweep --modes nats,local --rates 500,1000 --duration 5s
  loadtest --profile burst --json burst.json
  loadtest --profile burst --nodes 300 --duration 10s
  loadtest --target http://a:8800 --target http://b:8800 --api-key K1 --api-key K2 \
      --rate 50 --duration 2m

Flags (defaults shown are the chosen profile's):
`)
	fs.PrintDefaults()
}
