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
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"log/slog"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/groupscli"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/joincli"
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
  lmos-hub [serve] [flags]         run the hub (see lmos-hub serve --help)
  lmos-hub things ls|get|put|rm    manage Things on a running hub
  lmos-hub groups ls|create|add|rm|dissolve|rotate-credentials
                                   manage agent groups on a running hub
  lmos-hub join ls|approve|deny    decide on joins waiting for approval (deny --all: in bulk)
  lmos-hub token create|list|revoke
                                   manage admin tokens
  lmos-hub discover [--timeout 3s] list the hubs and Things mDNS sees on the LAN
  lmos-hub keygen [-o FILE]        make an Ed25519 did:key (key file 0600); print its DID
  lmos-hub sign [-key FILE] [-o OUT] TD.json|-
                                   add an eddsa-jcs-2022 proof to a TD
  lmos-hub verify [-key FILE] TD.json|-
                                   check a TD's proof: print the signer's DID and created, or why not
  lmos-hub backup|restore FILE     snapshot the store (of a running hub: --hub); put one back
  lmos-hub config print [flags]    print the effective configuration
  lmos-hub version [--tls]         print the version; --tls: the certificate's fingerprint
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	cmd, rest := "serve", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, rest = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(rest, stdout, stderr, getenv)
	case "things":
		return runThings(rest, stdin, stdout, stderr, getenv)
	case "groups":
		return groupscli.Run(rest, stdout, stderr, getenv)
	case "join":
		return joincli.Run(rest, stdout, stderr, getenv)
	case "token":
		return runToken(rest, stdout, stderr, getenv)
	case "config":
		return runConfig(rest, stdout, stderr, getenv)
	case "backup":
		return runBackup(rest, stdout, stderr, getenv)
	case "restore":
		return runRestore(rest, stdout, stderr, getenv)
	case "discover":
		return runDiscover(rest, stdout, stderr)
	case "keygen":
		return runKeygen(rest, stdout, stderr, getenv)
	case "sign":
		return runSign(rest, stdin, stdout, stderr, getenv)
	case "verify":
		return runVerify(rest, stdin, stdout, stderr, getenv)
	case "version":
		return runVersion(rest, stdout, stderr, getenv)
	case "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "error: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// serve runs the hub until SIGINT or SIGTERM, then shuts down within
// shutdownTimeout; a second signal aborts the shutdown.
func serve(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := app.LoadConfig(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, "usage: lmos-hub [serve] [flags]\n\n")
		app.PrintServeFlags(stdout)
		return exitOK
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "error:", line)
		}
		return exitUsage
	}
	logger := newLogger(stderr, cfg.Log)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	m := app.NewMain(cfg, stdout, logger)
	m.Version = version
	if err := m.Run(context.Background()); err != nil {
		logger.Error("cannot start", "err", err)
		switch {
		case errors.Is(err, store.ErrLocked):
			return exitLocked
		case errors.Is(err, syscall.EADDRINUSE):
			fmt.Fprintln(stderr, "hint: another program already listens on that port (an MQTT broker such as mosquitto on 1883?);"+
				" choose other ports with --http-addr and --mqtt-addr, e.g. --mqtt-addr :1884")
		}
		return exitFailure
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
