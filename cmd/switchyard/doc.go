// Command switchyard is the task coordinator: `switchyard serve` runs an
// instance, `switchyard node` a ready-made worker, and the other
// subcommands manage accounts, keys and the database.
//
// It owns the command line: flags (each also an environment variable,
// SWITCHYARD_ and the flag's name; flags.go), the subcommands, and the
// signal context. serve is flags → server.Config → server.New → Run, its
// flags bound to server.DefaultConfig so that --help shows the one set of
// defaults; node wraps the sdk's Node with sdk/handlers; accounts, keys and
// migrate open the store with serve's own --data-dir / --database-url;
// status reads a running instance's /api/v1/status and /api/health;
// healthcheck GETs /api/health (or /livez) for a container's health check.
//
// It must hold no logic of its own — what it does, server, sdk and store
// do — and must not exit below main: run returns errors, so tests drive
// every subcommand in process, and boot refusals reach the operator as
// one line each.
package main
