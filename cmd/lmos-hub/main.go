// Command lmos-hub is the LMOS hub for a LAN: a W3C WoT Thing Description
// directory for agents and tools, with its CLI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"log/slog"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/groupscli"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/joincli"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/mcpcli"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/peerscli"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes; the systemd unit and scripts rely on them.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure
	exitUsage   = 2 // bad flags, arguments or configuration
	exitLocked  = 3 // the data directory is in use by another process
	exitAborted = 4 // a second signal cut a slow shutdown short
)

const usage = `lmos-hub — the LMOS hub: a WoT Thing Description directory for agents on a LAN

usage:
  lmos-hub [serve] [flags]         run the hub (its flags: lmos-hub serve --help)
  lmos-hub things ls|get|put|rm|reset-credential
                                   manage Things on a running hub
  lmos-hub groups ls|create|add|rm|dissolve|rotate-credentials
                                   manage agent groups on a running hub
  lmos-hub peers ls|add|rm|links   pair this hub with other hubs (federation); its links (peers, sync, bridge)
  lmos-hub mcp [--hub URL]         the hub's MCP door on stdin/stdout, for LLM clients that launch a command
  lmos-hub join ls|approve|deny    decide on joins waiting for approval (deny --all: in bulk)
  lmos-hub token create|list|revoke
                                   manage admin tokens
  lmos-hub discover [--timeout 3s] list the hubs and Things mDNS sees on the LAN
  lmos-hub keygen [-o FILE]        make an Ed25519 did:key (key file 0600); print its DID
  lmos-hub sign [-key FILE] [-o OUT] TD.json|-
                                   add an eddsa-jcs-2022 proof to a TD
  lmos-hub verify [-key FILE] TD.json|-
                                   check a TD's proof: print the signer's DID and created, or why not
  lmos-hub backup [--hub URL] FILE a consistent snapshot of the store (of a running hub: --hub)
  lmos-hub restore FILE            put a backup in place (the hub stopped)
  lmos-hub config print|env        print the effective configuration, or every LMOS_HUB_* variable
  lmos-hub version [--tls]         print the version (also --version); --tls: the certificate's fingerprint
  lmos-hub help [COMMAND]          this text, or a command's (as lmos-hub COMMAND --help)

Exit status: 0 ok, 1 failure, 2 bad flags, arguments or configuration,
3 the data directory is in use, 4 a second signal cut the shutdown short.
`

// cliIO is where a command reads and writes, and its environment.
type cliIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// A command is one of lmos-hub's commands. Each answers --help and -h
// with its usage on stdout (exit 0), and so does each of its subs.
type command struct {
	name string
	subs []string
	run  func(args []string, c cliIO) int
}

// commands is every command `lmos-hub COMMAND` runs; the tests walk it
// to check that each, and each sub, answers --help.
var commands = []command{
	{name: "serve", run: func(a []string, c cliIO) int { return serve(a, c.stdout, c.stderr, c.getenv) }},
	{name: "things", subs: thingsCommands, run: func(a []string, c cliIO) int { return runThings(a, c.stdin, c.stdout, c.stderr, c.getenv) }},
	{name: "groups", subs: groupscli.Commands, run: func(a []string, c cliIO) int { return groupscli.Run(a, c.stdout, c.stderr, c.getenv) }},
	{name: "peers", subs: peerscli.Commands, run: func(a []string, c cliIO) int { return peerscli.Run(a, c.stdout, c.stderr, c.getenv) }},
	{name: "mcp", run: func(a []string, c cliIO) int { return mcpcli.Run(a, c.stdin, c.stdout, c.stderr, c.getenv) }},
	{name: "join", subs: joincli.Commands, run: func(a []string, c cliIO) int { return joincli.Run(a, c.stdout, c.stderr, c.getenv) }},
	{name: "token", subs: tokenCommands, run: func(a []string, c cliIO) int { return runToken(a, c.stdout, c.stderr, c.getenv) }},
	{name: "config", subs: configCommands, run: func(a []string, c cliIO) int { return runConfig(a, c.stdout, c.stderr, c.getenv) }},
	{name: "backup", run: func(a []string, c cliIO) int { return runBackup(a, c.stdout, c.stderr, c.getenv) }},
	{name: "restore", run: func(a []string, c cliIO) int { return runRestore(a, c.stdout, c.stderr, c.getenv) }},
	{name: "discover", run: func(a []string, c cliIO) int { return runDiscover(a, c.stdout, c.stderr) }},
	{name: "keygen", run: func(a []string, c cliIO) int { return runKeygen(a, c.stdout, c.stderr, c.getenv) }},
	{name: "sign", run: func(a []string, c cliIO) int { return runSign(a, c.stdin, c.stdout, c.stderr, c.getenv) }},
	{name: "verify", run: func(a []string, c cliIO) int { return runVerify(a, c.stdin, c.stdout, c.stderr, c.getenv) }},
	{name: "version", run: func(a []string, c cliIO) int { return runVersion(a, c.stdout, c.stderr, c.getenv) }},
}

func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// environ lists the process's environment for the warning about unknown
// LMOS_HUB_* variables: os.Environ in main; none for run in-process.
var environ = func() []string { return nil }

func main() {
	environ = os.Environ
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	c := cliIO{stdin, stdout, stderr, getenv}
	if len(args) == 0 {
		return serve(nil, stdout, stderr, getenv)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "-version", "--version":
		return runVersion(args[1:], stdout, stderr, getenv)
	case "help":
		// `help things get` is `things get --help`.
		if len(args) > 1 {
			return run(append(append([]string{}, args[1:]...), "--help"), stdin, stdout, stderr, getenv)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if strings.HasPrefix(args[0], "-") {
		return serve(args, stdout, stderr, getenv)
	}
	cmd := lookupCommand(args[0])
	if cmd == nil {
		fmt.Fprintf(stderr, "error: unknown command %q (see: lmos-hub --help)\n", args[0])
		return exitUsage
	}
	return cmd.run(args[1:], c)
}

// serve runs the hub until SIGINT or SIGTERM, then shuts down within
// shutdownTimeout; a second signal aborts the shutdown.
func serve(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := app.LoadConfig(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, "usage: lmos-hub [serve] [flags]\n\nRuns the hub until SIGINT or SIGTERM.\n\n")
		app.PrintServeFlags(stdout)
		return exitOK
	}
	if err != nil {
		if jsonAsked(args, getenv) {
			// No plain line in a JSON log: each error is a record.
			l := newLogger(stderr, app.LogConfig{Format: "json", Level: "info"})
			for _, line := range strings.Split(err.Error(), "\n") {
				l.Error(line, "see", "lmos-hub serve --help")
			}
			return exitUsage
		}
		return configErr(stderr, "serve", err)
	}
	logger := newLogger(stderr, cfg.Log)
	for _, u := range app.UnknownEnvVars(environ()) {
		attrs := []any{"name", u.Name}
		if u.Like != "" {
			attrs = append(attrs, "did_you_mean", u.Like)
		}
		logger.Warn("unknown environment variable ignored: no setting has this name (lmos-hub config env lists them)", attrs...)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	m := app.NewMain(cfg, stdout, logger)
	m.Version = version
	if err := m.Run(context.Background()); err != nil {
		logger.Error("cannot start", "err", err)
		// A hint is a line of its own, in the log's format: a JSON log
		// has no plain line.
		hint := func(h string) { fmt.Fprintln(stderr, h) }
		if cfg.Log.Format == "json" {
			hint = func(h string) { logger.Info(h) }
		}
		return startFailed(hint, err)
	}
	code := exitOK
	select {
	case s := <-sigs:
		logger.Info("shutting down", "signal", s.String())
	case err := <-m.Err():
		logger.Error("stopping after a failure", "err", err)
		code = exitFailure
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.ShutdownTimeout))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Close(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			logger.Error("shutdown incomplete", "err", err)
			return exitFailure
		}
		logger.Info("stopped")
		return code
	case s := <-sigs:
		logger.Warn("second signal, aborting shutdown", "signal", s.String())
		return exitAborted
	}
}

// startFailed gives the exit status of a start that failed, and a hint
// where the user can act: the busy port's flag, the data directory's.
func startFailed(hint func(string), err error) int {
	var le *app.ListenError
	switch {
	case errors.Is(err, store.ErrLocked):
		return exitLocked
	case errors.Is(err, app.ErrDataDir):
		hint("hint: the data directory must be a directory the hub can create and write:" +
			" choose another with --data-dir DIR (env LMOS_HUB_DATA_DIR, YAML dataDir); under systemd," +
			" StateDirectory=lmos-hub makes /var/lib/lmos-hub for the service's user")
		return exitUsage
	case errors.As(err, &le) && errors.Is(err, syscall.EADDRINUSE):
		hint(portHint(le))
	}
	return exitFailure
}

// portHint names the busy door and the flag that moves it.
func portHint(le *app.ListenError) string {
	flagName := le.Setting
	for _, v := range app.EnvVars() {
		if v.Setting == le.Setting && v.Flag != "" && !v.Alias {
			flagName = v.Flag
		}
	}
	who := "another program"
	if le.Setting == "mqtt.addr" || le.Setting == "tls.mqttsAddr" {
		who = "another program (an MQTT broker such as mosquitto?)"
	}
	example := ""
	if host, port, err := net.SplitHostPort(le.Addr); err == nil {
		if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65535 {
			example = fmt.Sprintf(", e.g. %s %s", flagName, net.JoinHostPort(host, strconv.Itoa(n+1)))
		}
	}
	return fmt.Sprintf("hint: %s already listens on %s, the address of %s; choose another with %s%s", who, le.Addr, le.Setting, flagName, example)
}

// configErr writes a bad configuration or command line: an error on one
// line points to path's --help; several are listed, then the pointer.
func configErr(stderr io.Writer, path string, err error) int {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return cliargs.UsageErr(stderr, path, lines[0])
	}
	for _, line := range lines {
		fmt.Fprintln(stderr, "error:", line)
	}
	fmt.Fprintf(stderr, "see: lmos-hub %s --help\n", path)
	return exitUsage
}

// jsonAsked reports whether the command line or the environment asks for
// a JSON log (what a configuration that failed to load would have said).
func jsonAsked(args []string, getenv func(string) string) bool {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == "log-format=json" || a == "log-format" && i+1 < len(args) && args[i+1] == "json" {
			return true
		}
	}
	return getenv("LMOS_HUB_LOG_FORMAT") == "json"
}

// newLogger builds the process logger from the log settings.
func newLogger(w io.Writer, cfg app.LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.Level)))
	opts := &slog.HandlerOptions{Level: level}
	var l *slog.Logger
	if cfg.Format == "json" {
		l = slog.New(slog.NewJSONHandler(w, opts))
	} else {
		l = slog.New(slog.NewTextHandler(w, opts))
	}
	// Libraries that print through the standard log package (the metrics
	// library when it cannot read /proc) log through l, so that JSON mode
	// writes JSON only.
	log.SetFlags(0)
	log.SetOutput(slog.NewLogLogger(l.Handler(), slog.LevelWarn).Writer())
	return l
}
