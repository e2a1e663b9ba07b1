#!/usr/bin/env bash
# Tests the container deployment end to end with podman: builds the Dockerfile
# unchanged, brings deploy/compose.yaml up (three instances behind HAProxy,
# Redis, PostgreSQL), and checks that
#   - every container's health check passes,
#   - every instance, and the load balancer, reports "instances": 3,
#   - a node connected to one instance serves a request sent to another
#     (plain and streaming), and a node connected through the load balancer's
#     port (its WebSocket through HAProxy) serves requests sent to the others.
#
# Opt-in: neither CI nor scripts/test.sh runs it. It needs root (podman,
# apt-get) and about 2 GB of disk. It takes 5 to 10 minutes, most of them the
# Dockerfile's build compiling every package (it has no build cache); the first
# run adds a few for debootstrap and the other images.
#
#   ./scripts/test-container.sh          # test, then take everything down
#   KEEP=1 ./scripts/test-container.sh   # leave the deployment running
#   ./scripts/test-container.sh down     # take a KEEP=1 deployment down
#
# It is written for a machine that reaches Debian's packages and the Go module
# proxy but no container registry, and has no Docker engine and no systemd:
#   - podman, runc, debootstrap, docker-compose, curl and iptables (netavark
#     sets up container networks with it) come from apt;
#   - the base images the Dockerfile names, golang:1.26-bookworm and
#     gcr.io/distroless/static-debian12:nonroot, and debian:bookworm-slim (the
#     base of deploy/*/Dockerfile), are made locally under those names: a
#     debootstrapped bookworm; on it the host's Go toolchain (/usr/local/go),
#     git, and the host's own CA certificates (/usr/local/share/ca-certificates:
#     HTTPS may go through an inspecting proxy); and a minimal root file system
#     with the nonroot user (uid 65532), CA certificates and time zones. They
#     and the images made from them carry the label switchyard.test.base.
#     Builds use --pull=never and the host's network;
#   - podman runs with its own containers.conf (CONTAINERS_CONF, in the cache
#     directory; the system's is not touched): runtime runc, cgroup_manager
#     "cgroupfs", file events, and explicit default_ulimits — podman's default
#     nofile (1048576) is over this machine's hard limit, and runc cannot set
#     it, nor an nproc over conmon's (32768 here);
#   - compose is docker-compose (Debian's, 1.29) talking to a podman API socket
#     that this script starts. Debian's podman-compose (1.0.3) runs every
#     health check through /bin/sh, which the distroless image does not have;
#   - podman runs health checks from systemd timers, and there is no systemd
#     here: a loop in this script runs `podman healthcheck run` on the
#     project's containers every 2 s instead, so that depends_on's
#     service_healthy and the health states mean what they say.
#
# Environment:
#   KEEP=1                      leave the deployment (and the API socket) running
#   SWITCHYARD_PORT             the load balancer's port on the host (default 18800)
#   SWITCHYARD_1_PORT..3_PORT   each instance's port on 127.0.0.1 (default 18801..18803)
#   SWITCHYARD_CONTAINER_CACHE  the cache (default ~/.cache/switchyard-container):
#                               the debootstrapped file system, containers.conf, logs
#   DEBIAN_MIRROR               for debootstrap (default http://deb.debian.org/debian)
#   GOPROXY, GOFLAGS            when set, baked into the local golang image so
#                               that the build's `go mod download` uses them
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

KEEP=${KEEP:-0}
CACHE=${SWITCHYARD_CONTAINER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard-container}
PROJECT=switchyard-test
COMPOSE_YAML=$ROOT/deploy/compose.yaml
ENV_FILE=$ROOT/deploy/switchyard.env
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export SWITCHYARD_PORT=${SWITCHYARD_PORT:-18800}
export SWITCHYARD_1_PORT=${SWITCHYARD_1_PORT:-18801}
export SWITCHYARD_2_PORT=${SWITCHYARD_2_PORT:-18802}
export SWITCHYARD_3_PORT=${SWITCHYARD_3_PORT:-18803}
INSTANCE_PORTS=("$SWITCHYARD_1_PORT" "$SWITCHYARD_2_PORT" "$SWITCHYARD_3_PORT")

DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
GOLANG_IMAGE=docker.io/library/$(sed -n 's/^FROM \(golang:[^ ]*\).*/\1/p' Dockerfile | head -n1)
DISTROLESS_IMAGE=$(sed -n 's/^FROM \(gcr\.io\/distroless\/[^ ]*\).*/\1/p' Dockerfile | head -n1)

started=$(date +%s)
say() { printf '\033[1m==> [%4ss] %s\033[0m\n' "$(($(date +%s) - started))" "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
fail() {
	printf '\033[1;31mFAIL: %s\033[0m\n' "$*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || fail "run it as root (podman here is rootful, and it installs packages with apt-get)"
[ "$GOLANG_IMAGE" != docker.io/library/ ] || fail "no 'FROM golang:…' line in the Dockerfile"
[ -n "$DISTROLESS_IMAGE" ] || fail "no 'FROM gcr.io/distroless/…' line in the Dockerfile"
mkdir -p "$CACHE"

# ---------------------------------------------------------------- tools

install_tools() {
	local missing=() pair
	for pair in podman:podman runc:runc debootstrap:debootstrap docker-compose:docker-compose \
		curl:curl python3:python3 iptables:iptables netavark:netavark aardvark-dns:aardvark-dns; do
		local cmd=${pair%%:*} pkg=${pair#*:}
		case $cmd in
		netavark | aardvark-dns) [ -x "/usr/lib/podman/$cmd" ] || missing+=("$pkg") ;;
		*) command -v "$cmd" >/dev/null || missing+=("$pkg") ;;
		esac
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]} from Debian's packages"
		{
			DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
					--no-install-recommends "${missing[@]}"
		} >"$CACHE/apt.log" 2>&1 || {
			tail -n 20 "$CACHE/apt.log" >&2
			fail "apt-get install ${missing[*]} failed (whole log: $CACHE/apt.log)"
		}
	fi
}

# podman's settings for this script, apart from the system's.
write_containers_conf() {
	local nofile nproc
	nofile=$(ulimit -Hn)
	[ "$nofile" = unlimited ] && nofile=1048576
	# conmon, which starts runc, runs here with RLIMIT_NPROC 32768; a
	# container asking for more fails with "error setting rlimit type 6".
	nproc=$(ulimit -Hu)
	if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
	cat >"$CACHE/containers.conf" <<-EOF
		# Written by scripts/test-container.sh; used through CONTAINERS_CONF.
		[containers]
		default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
		[engine]
		runtime = "runc"
		cgroup_manager = "cgroupfs"
		events_logger = "file"
	EOF
	export CONTAINERS_CONF=$CACHE/containers.conf
}

# The Docker API on a podman socket, for docker-compose.
SERVICE_PID=
start_api_service() {
	local sock=$CACHE/podman.sock
	export DOCKER_HOST=unix://$sock
	if curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
		return # a KEEP=1 run left it running
	fi
	rm -f "$sock"
	setsid podman system service --time=0 "unix://$sock" >"$CACHE/podman-service.log" 2>&1 &
	SERVICE_PID=$!
	echo "$SERVICE_PID" >"$CACHE/podman-service.pid"
	for _ in $(seq 50); do
		curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && return
		sleep 0.2
	done
	fail "the podman API service did not start: see $CACHE/podman-service.log"
}

compose() { docker-compose --ansi never -p "$PROJECT" -f "$COMPOSE_YAML" "$@"; }

# The container of a compose service.
cid() {
	podman ps -q --filter "label=com.docker.compose.project=$PROJECT" \
		--filter "label=com.docker.compose.service=$1" | head -n1
}

# Stands in for systemd's health-check timers (see the top of the file).
TICKER_PID=
start_health_ticker() {
	(
		while :; do
			for id in $(podman ps -q --filter "label=com.docker.compose.project=$PROJECT"); do
				podman healthcheck run "$id" >/dev/null 2>&1 &
			done
			wait
			sleep 2
		done
	) &
	TICKER_PID=$!
}

stop_background() {
	[ -z "$TICKER_PID" ] || kill "$TICKER_PID" 2>/dev/null || true
	if [ -n "$SERVICE_PID" ]; then
		kill "$SERVICE_PID" 2>/dev/null || true
		rm -f "$CACHE/podman-service.pid"
	fi
}

if [ "${1:-}" = down ]; then
	install_tools
	write_containers_conf
	start_api_service
	say "taking $PROJECT down"
	compose down -v --remove-orphans
	podman rm -f "$PROJECT-node-a" "$PROJECT-node-b" >/dev/null 2>&1 || true
	kill "$(cat "$CACHE/podman-service.pid" 2>/dev/null)" 2>/dev/null || true
	rm -f "$CACHE/podman-service.pid"
	exit 0
fi

# ---------------------------------------------------------------- images

# Is the image there, made by this script?
made_here() {
	podman image exists "$1" &&
		[ -n "$(podman image inspect --format '{{index .Config.Labels "switchyard.test.base"}}' "$1")" ]
}

# debian:bookworm-slim from debootstrap, the file system cached as a tarball.
make_debian_image() {
	made_here "$DEBIAN_IMAGE" && return
	local tarball=$CACHE/debian-bookworm.tar
	if [ ! -s "$tarball" ]; then
		say "debootstrapping Debian bookworm into $CACHE (once; a few minutes)"
		local rootfs=$CACHE/rootfs.tmp
		rm -rf "$rootfs"
		debootstrap --variant=minbase --include=ca-certificates,tzdata bookworm "$rootfs" \
			"$DEBIAN_MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
			fail "debootstrap failed: see $CACHE/debootstrap.log"
		rm -f "$rootfs/etc/apt/sources.list" "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"
		cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<-EOF
			Types: deb
			URIs: http://deb.debian.org/debian
			Suites: bookworm bookworm-updates
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

			Types: deb
			URIs: http://deb.debian.org/debian-security
			Suites: bookworm-security
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		EOF
		rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
		tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
		rm -rf "$rootfs"
	fi
	say "importing $DEBIAN_IMAGE"
	podman import -q --change 'CMD ["bash"]' --change 'LABEL switchyard.test.base=debian' \
		"$tarball" "$DEBIAN_IMAGE" >/dev/null
}

# golang:1.26-bookworm: the Debian image, git, and the host's Go toolchain
# (whose version must be the one the Dockerfile names).
make_golang_image() {
	local want=${GOLANG_IMAGE#*golang:} have label
	want=${want%%-*}
	have=$(go env GOVERSION 2>/dev/null || true)
	case $have in
	go"$want" | go"$want".*) ;;
	*) fail "the Dockerfile builds with Go $want, and the Go on this host is '${have:-missing}': install Go $want in /usr/local/go" ;;
	esac
	# The host's own CA certificates go in too: a machine whose HTTPS goes
	# through an inspecting proxy needs them for the module proxy.
	local cas
	cas=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-12)
	label="$have GOPROXY=${GOPROXY:-} GOFLAGS=${GOFLAGS:-} local-CAs=$cas"
	if made_here "$GOLANG_IMAGE" &&
		[ "$(podman image inspect --format '{{index .Config.Labels "switchyard.test.go"}}' "$GOLANG_IMAGE")" = "$label" ]; then
		return
	fi
	say "making $GOLANG_IMAGE from $DEBIAN_IMAGE and $(go env GOROOT) ($have)"
	local ctx=$CACHE/golang-context
	rm -rf "$ctx" && mkdir -p "$ctx"
	tar -C "$(dirname "$(go env GOROOT)")" -cf "$ctx/go.tar" "$(basename "$(go env GOROOT)")"
	mkdir -p "$ctx/ca"
	cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2>/dev/null || true
	{
		echo "FROM $DEBIAN_IMAGE"
		echo "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git netbase && rm -rf /var/lib/apt/lists/*"
		echo "COPY ca/ /usr/local/share/ca-certificates/"
		echo "RUN update-ca-certificates >/dev/null"
		echo "ADD go.tar /usr/local/"
		echo "ENV GOLANG_VERSION=${have#go} GOTOOLCHAIN=local GOPATH=/go"
		# shellcheck disable=SC2016 # $PATH is the image's, expanded by the build
		echo 'ENV PATH=/go/bin:/usr/local/go/bin:$PATH'
		[ -z "${GOPROXY:-}" ] || echo "ENV GOPROXY=$GOPROXY"
		[ -z "${GOFLAGS:-}" ] || echo "ENV GOFLAGS=$GOFLAGS"
		echo 'RUN mkdir -p /go/src /go/bin && chmod -R 1777 /go && go version'
		echo "LABEL switchyard.test.base=golang switchyard.test.go=\"$label\""
		echo "WORKDIR /go"
	} >"$ctx/Containerfile"
	podman build --pull=never --network host -t "$GOLANG_IMAGE" -f "$ctx/Containerfile" "$ctx" >"$CACHE/build.log" 2>&1 || {
		tail -n 30 "$CACHE/build.log" >&2
		fail "podman build of $GOLANG_IMAGE failed (whole log: $CACHE/build.log)"
	}
	rm -rf "$ctx"
}

# gcr.io/distroless/static-debian12:nonroot: passwd and group with nonroot
# (65532), CA certificates, time zones, /tmp; no shell, no package manager.
make_distroless_image() {
	made_here "$DISTROLESS_IMAGE" && return
	say "making $DISTROLESS_IMAGE"
	local fs=$CACHE/distroless.tmp
	rm -rf "$fs" && mkdir -p "$fs"
	tar -C "$fs" -xf "$CACHE/debian-bookworm.tar" ./etc/ssl/certs/ca-certificates.crt ./usr/share/zoneinfo ./etc/os-release ./usr/lib/os-release 2>/dev/null ||
		tar -C "$fs" -xf "$CACHE/debian-bookworm.tar" ./etc/ssl/certs/ca-certificates.crt ./usr/share/zoneinfo
	cat >"$fs/etc/passwd" <<-EOF
		root:x:0:0:root:/root:/sbin/nologin
		nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
		nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
	EOF
	cat >"$fs/etc/group" <<-EOF
		root:x:0:
		nobody:x:65534:
		tty:x:5:
		staff:x:50:
		nonroot:x:65532:
	EOF
	echo 'hosts: files dns' >"$fs/etc/nsswitch.conf"
	mkdir -p "$fs/tmp" "$fs/root" "$fs/home/nonroot"
	chmod 1777 "$fs/tmp"
	chmod 700 "$fs/root" "$fs/home/nonroot"
	chown 65532:65532 "$fs/home/nonroot"
	tar --numeric-owner -C "$fs" -c . | podman import -q \
		--change 'USER 65532' --change 'WORKDIR /home/nonroot' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
		--change 'LABEL switchyard.test.base=distroless' \
		- "$DISTROLESS_IMAGE" >/dev/null
	rm -rf "$fs"
}

build() { # tag context [podman build flags]
	local tag=$1 ctx=$2
	shift 2
	podman build --pull=never --network host --label switchyard.test.base=built -t "$tag" "$@" "$ctx" >"$CACHE/build.log" 2>&1 || {
		tail -n 30 "$CACHE/build.log" >&2
		fail "podman build of $tag failed (whole log: $CACHE/build.log)"
	}
}

# ---------------------------------------------------------------- checks

json() { # JSON on stdin, a Python expression on it (as j)
	python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"
}

wait_for() { # seconds description command...
	local secs=$1 what=$2
	shift 2
	local end=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || fail "$what: not within ${secs}s"
		sleep 1
	done
}

healthy() { [ "$(podman inspect --format '{{.State.Health.Status}}' "$(cid "$1")")" = healthy ]; }

instances_is_3() { [ "$(curl -fsS "$1/api/v1/status" | json 'j["instances"]')" = 3 ]; }

node_online() { # base URL, node name
	curl -fsS "$1/api/v1/nodes" | json "any(n['name'] == '$2' and n['online'] for n in j)" | grep -qx True
}

node_instance() { # base URL, node name: the name of the instance the node is on
	local id
	id=$(curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "$1/admin/api/nodes" |
		json "[n['instance'] for n in j if n['name'] == '$2'][0]")
	curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "$1/admin/api/status" |
		json "[i['name'] for i in j['cluster'] if i['id'] == '$id'][0]"
}

request() { # base URL, task type, content [stream]
	local body
	body=$(printf '{"task_type":"%s","content":"%s","stream":%s}' "$2" "$3" "${4:-false}")
	curl -fsS -N --max-time 30 -H "Authorization: Bearer $API_KEY" -d "$body" "$1/api/v1/request"
}

on_exit() {
	local rc=$?
	set +e
	if [ $rc != 0 ] && [ -n "${UP:-}" ]; then
		echo "---- the last lines of each service's log ----" >&2
		compose logs --no-color --tail=15 >&2 2>&1
		podman logs --tail=10 "$PROJECT-node-a" >&2 2>&1
		podman logs --tail=10 "$PROJECT-node-b" >&2 2>&1
	fi
	if [ "$KEEP" = 1 ] && [ -n "${UP:-}" ]; then
		[ -z "$TICKER_PID" ] || kill "$TICKER_PID" 2>/dev/null
		echo "KEEP=1: the deployment is up (lb http://127.0.0.1:$SWITCHYARD_PORT, instances on 127.0.0.1:${INSTANCE_PORTS[*]})."
		echo "  podman ps; podman logs CONTAINER   (with CONTAINERS_CONF=$CONTAINERS_CONF)"
		echo "  DOCKER_HOST=$DOCKER_HOST docker-compose -p $PROJECT -f deploy/compose.yaml ps"
		echo "  health checks do not run by themselves here (no systemd): podman healthcheck run CONTAINER"
		echo "take it down with: $0 down"
		exit $rc
	fi
	if [ -n "${UP:-}" ]; then
		podman rm -f "$PROJECT-node-a" "$PROJECT-node-b" >/dev/null 2>&1
		say "taking the deployment down"
		compose down -v --remove-orphans >"$CACHE/down.log" 2>&1 || cat "$CACHE/down.log" >&2
	fi
	stop_background
	if [ $rc = 0 ]; then say "PASS ($(($(date +%s) - started)) s)"; fi
	exit $rc
}
trap on_exit EXIT

# ---------------------------------------------------------------- run

install_tools
write_containers_conf
say "podman $(podman version --format '{{.Client.Version}}'), $(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /'), cache $CACHE"

make_debian_image
make_golang_image
make_distroless_image
ok "base images: $DEBIAN_IMAGE, $GOLANG_IMAGE, $DISTROLESS_IMAGE"

version=$(git describe --always --dirty 2>/dev/null || echo dev)
say "building the Dockerfile (unchanged) as switchyard, version $version (minutes: it compiles everything)"
git diff --quiet HEAD -- Dockerfile 2>/dev/null || say "note: the Dockerfile has uncommitted changes"
build localhost/switchyard:latest . -f Dockerfile --build-arg "VERSION=$version"
out=$(podman run --rm localhost/switchyard:latest version 2>&1) || true
[ "$out" = "$version" ] || fail "the image's switchyard does not print version $version; podman run said: $out"
[ "$(podman image inspect --format '{{.Config.User}}' localhost/switchyard:latest)" = nonroot:nonroot ] ||
	fail "the image does not run as nonroot"
ok "the image runs $(podman run --rm localhost/switchyard:latest version) as nonroot"
for svc in redis postgres haproxy; do
	say "building deploy/$svc"
	build "localhost/switchyard-$svc:latest" "deploy/$svc"
done
# The local bases and every image built here carry the label
# switchyard.test.base (the Dockerfile's build stage inherits golang's): drop
# the ones this and earlier runs left untagged (the build stage, replaced
# images, about 1.5 GB a run), and nothing else of podman's.
podman image prune -f --filter label=switchyard.test.base >/dev/null

if [ ! -s "$ENV_FILE" ]; then
	say "writing deploy/switchyard.env with a random admin token and database password"
	token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	password=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	sed -e "s/^SWITCHYARD_ADMIN_TOKEN=.*/SWITCHYARD_ADMIN_TOKEN=$token/" \
		-e "s/change-me/$password/g" deploy/switchyard.env.example >"$ENV_FILE"
	chmod 600 "$ENV_FILE"
fi
ADMIN_TOKEN=$(sed -n 's/^SWITCHYARD_ADMIN_TOKEN=//p' "$ENV_FILE" | tail -n1)
[ ${#ADMIN_TOKEN} -ge 16 ] || fail "SWITCHYARD_ADMIN_TOKEN in deploy/switchyard.env is shorter than 16 characters"

for port in "$SWITCHYARD_PORT" "${INSTANCE_PORTS[@]}"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		fail "port $port is taken on this host: set SWITCHYARD_PORT / SWITCHYARD_N_PORT (or run '$0 down' if a KEEP=1 run left it)"
	fi
done

start_api_service
start_health_ticker
say "docker-compose up (project $PROJECT): redis, postgres, switchyard-1..3, lb"
UP=1
compose up -d --no-build >"$CACHE/up.log" 2>&1 || {
	cat "$CACHE/up.log" >&2
	fail "docker-compose up failed"
}
for svc in redis postgres switchyard-1 switchyard-2 switchyard-3 lb; do
	wait_for 90 "the health check of $svc" healthy "$svc"
done
ok "every container is healthy (redis, postgres, switchyard-1..3, lb)"

LB=http://127.0.0.1:$SWITCHYARD_PORT
for i in 1 2 3; do
	base=http://127.0.0.1:${INSTANCE_PORTS[$((i - 1))]}
	wait_for 60 "switchyard-$i reporting instances: 3" instances_is_3 "$base"
	name=$(curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "$base/admin/api/status" | json 'j["instance_name"]')
	[ "$name" = "switchyard-$i" ] || fail "127.0.0.1:${INSTANCE_PORTS[$((i - 1))]} is $name, not switchyard-$i"
	ok "switchyard-$i ($base): $(curl -fsS "$base/api/v1/status" | json '"instances: %s, mode: %s, store: %s, ready: %s" % (j["instances"], j["mode"], j["store"], j["ready"])')"
done
instances_is_3 "$LB" || fail "the load balancer's answer does not report instances: 3"
ok "the load balancer ($LB): instances: 3"

API_KEY=$(podman exec "$(cid switchyard-1)" /usr/local/bin/switchyard accounts create --name "e2e-$(date +%s)" | tail -n1) ||
	fail "switchyard accounts create in switchyard-1 failed"
[[ $API_KEY == gn_* ]] || fail "accounts create did not print a key: $API_KEY"
ok "an account and key made with 'switchyard accounts create' in switchyard-1"

# Node A on switchyard-1's own port, requests to switchyard-2 and -3.
podman run -d --name "$PROJECT-node-a" --network host localhost/switchyard:latest node \
	--url "http://127.0.0.1:$SWITCHYARD_1_PORT" --api-key "$API_KEY" --name node-a \
	--capability via-one --handler echo >/dev/null
wait_for 30 "node-a online as seen from switchyard-2" node_online "http://127.0.0.1:$SWITCHYARD_2_PORT" node-a
where=$(node_instance "http://127.0.0.1:$SWITCHYARD_2_PORT" node-a) || fail "cannot find node-a in /admin/api/nodes"
[ "$where" = switchyard-1 ] || fail "node-a is on $where, not switchyard-1"
ok "node-a is connected to switchyard-1"
out=$(request "http://127.0.0.1:$SWITCHYARD_2_PORT" via-one "sent to switchyard-2") || fail "the request to switchyard-2 for node-a failed"
[ "$(echo "$out" | json 'j["status"] + " " + j["result"]')" = "completed sent to switchyard-2" ] ||
	fail "the request to switchyard-2 for node-a answered: $out"
ok "a request sent to switchyard-2 was served by node-a on switchyard-1: $out"
out=$(request "http://127.0.0.1:$SWITCHYARD_3_PORT" via-one "streamed from switchyard-3" true) || fail "the stream from switchyard-3 for node-a failed"
{ echo "$out" | grep -q '"delta":"streamed from switchyard-3"' && echo "$out" | grep -q '"done":true'; } ||
	fail "the stream from switchyard-3 for node-a was: $out"
ok "a stream sent to switchyard-3 was served by node-a: $(echo "$out" | grep -c '^data:') events, the last with done"

# Node B through the load balancer (its WebSocket through HAProxy); requests
# to each instance it is not on, and one through the load balancer.
podman run -d --name "$PROJECT-node-b" --network host localhost/switchyard:latest node \
	--url "$LB" --api-key "$API_KEY" --name node-b --capability via-lb --handler echo >/dev/null
wait_for 30 "node-b online" node_online "$LB" node-b
where=$(node_instance "$LB" node-b) || fail "cannot find node-b in /admin/api/nodes"
ok "node-b connected through the load balancer; it landed on $where"
for i in 1 2 3; do
	[ "switchyard-$i" != "$where" ] || continue
	out=$(request "http://127.0.0.1:${INSTANCE_PORTS[$((i - 1))]}" via-lb "sent to switchyard-$i") || fail "the request to switchyard-$i for node-b failed"
	[ "$(echo "$out" | json 'j["status"] + " " + j["result"]')" = "completed sent to switchyard-$i" ] ||
		fail "the request to switchyard-$i for node-b answered: $out"
	ok "a request sent to switchyard-$i was served by node-b on $where"
done
out=$(request "$LB" via-lb "through the load balancer") || fail "the request through the load balancer failed"
[ "$(echo "$out" | json 'j["status"]')" = completed ] || fail "the request through the load balancer answered: $out"
ok "a request through the load balancer was served by node-b"
