package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/eclipse-lmos/lmos-hub/app"
)

const configUsage = `usage: lmos-hub config print [serve flags]

Prints the effective configuration (defaults < YAML file < LMOS_HUB_*
environment variables < flags) as YAML, with the admin token redacted.

Serve flags:
`

// runConfig implements `lmos-hub config print [serve flags]`: it prints the
// effective, redacted configuration as YAML. Exit 0, or 2 on a bad
// configuration or usage.
func runConfig(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "error: missing subcommand: lmos-hub config print")
		fmt.Fprint(stderr, configUsage)
		app.PrintServeFlags(stderr)
		return 2
	}
	switch args[0] {
	case "print":
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, configUsage)
		app.PrintServeFlags(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "error: unknown subcommand %q: lmos-hub config has only print\n", args[0])
		fmt.Fprint(stderr, configUsage)
		app.PrintServeFlags(stderr)
		return 2
	}
	cfg, err := app.LoadConfig(args[1:], getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, configUsage)
		app.PrintServeFlags(stdout)
		return 0
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "error:", line)
		}
		fmt.Fprintln(stderr, "run `lmos-hub config print --help` for the flags")
		return 2
	}
	var buf bytes.Buffer
	buf.WriteString("# effective lmos-hub configuration (defaults < file < LMOS_HUB_* environment < flags)\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cfg.Redacted()); err != nil {
		fmt.Fprintln(stderr, "error: cannot encode the configuration:", err)
		return 2
	}
	if err := enc.Close(); err != nil {
		fmt.Fprintln(stderr, "error: cannot encode the configuration:", err)
		return 2
	}
	if _, err := stdout.Write(buf.Bytes()); err != nil {
		fmt.Fprintln(stderr, "error: cannot write the configuration:", err)
		return 1
	}
	return 0
}
