// Package cliargs holds what the lmos-hub subcommands share about their
// arguments and output: flags among the positional arguments, a hub URL,
// table cells, and the client of a running hub's HTTP API that the
// subcommands managing it (groups, join) use.
package cliargs

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode"
)

// Parse parses fs's flags where they stand among the positional
// arguments (`things get ID --raw`) and returns the positional ones; "--"
// ends the flags.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// HubURL accepts "http://host:port[/prefix]", "https://…" or a bare
// "host:port" (http assumed), and returns it without a trailing slash.
func HubURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q is not a hub URL such as http://localhost:8080", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// Cell makes a table cell of text the hub or a Thing wrote: "-" when
// empty, every control character (C0, DEL and C1, such as the CSI that
// starts terminal escape sequences) a space, so a title cannot break the
// table or drive the terminal.
func Cell(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if s == "" {
		return "-"
	}
	return s
}

// UsageErr writes a mistake in the command line as one line naming the
// command whose --help shows the usage, and returns exit status 2. path is
// the command as typed after "lmos-hub" ("groups ls").
func UsageErr(stderr io.Writer, path, msg string) int {
	fmt.Fprintf(stderr, "error: %s (see: lmos-hub %s --help)\n", msg, path)
	return 2
}

// IsHelp reports whether arg asks for help.
func IsHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}
