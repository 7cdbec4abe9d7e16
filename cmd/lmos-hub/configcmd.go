package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
)

const configUsage = `usage: lmos-hub config print [serve flags]
       lmos-hub config env

print: the effective configuration (defaults < YAML file < LMOS_HUB_*
environment variables < flags) as YAML, with the admin token redacted.
env: every setting's LMOS_HUB_* environment variable.

Serve flags:
`

// runConfig implements `lmos-hub config print [serve flags]`: it prints the
// effective, redacted configuration as YAML. Exit 0, or 2 on a bad
// configuration or usage.
// configCommands are the subcommands of `lmos-hub config`.
var configCommands = []string{"print", "env"}

func runConfig(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		return cliargs.UsageErr(stderr, "config", "missing command: print or env")
	}
	switch {
	case cliargs.IsHelp(args[0]):
		fmt.Fprint(stdout, configUsage)
		app.PrintServeFlags(stdout)
		return 0
	case args[0] == "env":
		return runConfigEnv(args[1:], stdout, stderr)
	case args[0] != "print":
		return cliargs.UsageErr(stderr, "config", fmt.Sprintf("unknown command %q: use print or env", args[0]))
	}
	cfg, err := app.LoadConfig(args[1:], getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, configUsage)
		app.PrintServeFlags(stdout)
		return 0
	}
	if err != nil {
		return configErr(stderr, "config print", err)
	}
	for _, u := range app.UnknownEnvVars(environ()) {
		fmt.Fprintf(stderr, "warning: unknown environment variable %s ignored: no setting has this name (lmos-hub config env lists them)", u.Name)
		if u.Like != "" {
			fmt.Fprintf(stderr, "; did you mean %s?", u.Like)
		}
		fmt.Fprintln(stderr)
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

// runConfigEnv prints every setting's environment variable beside its
// YAML name: the list app derives from the configuration's fields.
func runConfigEnv(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if cliargs.IsHelp(args[0]) {
			fmt.Fprint(stdout, configUsage)
			return 0
		}
		return cliargs.UsageErr(stderr, "config env", fmt.Sprintf("config env takes no arguments, got %q", args[0]))
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tSETTING\tFLAG")
	for _, v := range app.EnvVars() {
		setting := v.Setting
		if v.Alias {
			setting += " (older name; wins)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Name, setting, dash(v.Flag))
	}
	_ = tw.Flush()
	return 0
}
