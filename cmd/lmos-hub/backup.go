package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/store"
)

const backupUsage = `usage:
  lmos-hub backup [--hub URL --token TOKEN] [--data-dir DIR] FILE
  lmos-hub restore [--data-dir DIR] FILE

backup writes a consistent snapshot of the hub's store (hub.db: Things,
tokens, groups, credentials, broker sessions) to FILE. With --hub (env
LMOS_HUB_URL) it asks the running hub (POST /api/backup, an admin --token,
env LMOS_HUB_TOKEN), which keeps serving meanwhile; without, it reads the
store in --data-dir (env LMOS_HUB_DATA_DIR, default ./lmos-data) of a
stopped hub. FILE is written whole or not at all, and checked.

restore puts FILE in place as the store of --data-dir. It refuses while a
hub runs on that directory (exit 3) and refuses a FILE that is not a hub
store (exit 2), changing nothing either way; the old store is kept beside
it as hub.db.pre-restore-TIME. The hub's key (hub-key.json) and TLS files
are not in the store: copy them yourself when moving to another machine.

Exit status: 0 ok, 1 failure, 2 usage error or not a store, 3 a hub runs
on the data directory.
`

// runBackup implements `lmos-hub backup`.
func runBackup(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dataDir := fs.String("data-dir", firstNonEmpty(getenv("LMOS_HUB_DATA_DIR"), app.DefaultConfig().DataDir), "")
	hubURL := fs.String("hub", getenv("LMOS_HUB_URL"), "")
	token := fs.String("token", getenv("LMOS_HUB_TOKEN"), "")
	file, code := backupArgs(fs, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	write := func(w io.Writer) error { _, err := store.BackupDir(*dataDir, w, 500*time.Millisecond); return err }
	if *hubURL != "" {
		u, err := cliargs.HubURL(*hubURL)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitUsage
		}
		write = func(w io.Writer) error { return backupFromHub(u.String(), *token, w) }
	}
	info, err := writeChecked(file, write)
	switch {
	case errors.Is(err, store.ErrLocked):
		fmt.Fprintf(stderr, "error: %v\na hub is running on it: back up through it with --hub URL --token TOKEN\n", err)
		return exitLocked
	case err != nil:
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "backed up hub %s (%d Things) to %s\n", info.HubID, info.Things, file)
	return exitOK
}

// runRestore implements `lmos-hub restore`.
func runRestore(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dataDir := fs.String("data-dir", firstNonEmpty(getenv("LMOS_HUB_DATA_DIR"), app.DefaultConfig().DataDir), "")
	file, code := backupArgs(fs, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "error: cannot read the backup: %v\n", err)
		return exitUsage
	}
	defer f.Close()
	info, kept, err := store.Restore(*dataDir, f, 500*time.Millisecond)
	switch {
	case errors.Is(err, store.ErrLocked):
		fmt.Fprintf(stderr, "error: %v\nstop the hub first (systemctl stop lmos-hub); nothing was changed\n", err)
		return exitLocked
	case errors.Is(err, store.ErrNotStore):
		fmt.Fprintf(stderr, "error: %v\nnothing was changed\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "restored hub %s (%d Things) into %s\n", info.HubID, info.Things, *dataDir)
	if kept != "" {
		fmt.Fprintf(stdout, "the store it replaced is kept as %s\n", kept)
	}
	return exitOK
}

// backupArgs parses the flags and the one FILE; code is -1 to go on, else
// the exit status (help printed, or a usage error).
func backupArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (file string, code int) {
	pos, err := cliargs.Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, backupUsage)
		return "", exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v (see lmos-hub %s --help)\n", err, fs.Name())
		return "", exitUsage
	}
	if len(pos) != 1 || pos[0] == "" {
		fmt.Fprintf(stderr, "error: %s takes one FILE\n\n%s", fs.Name(), backupUsage)
		return "", exitUsage
	}
	return pos[0], -1
}

// writeChecked writes the snapshot to a temporary file beside file,
// checks it is a whole store (a stream cut short is not) and renames it
// to file.
func writeChecked(file string, write func(io.Writer) error) (store.Info, error) {
	f, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".part-*")
	if err != nil {
		return store.Info{}, fmt.Errorf("cannot create the backup file: %w", err)
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("cannot write the backup file: %w", cerr)
	}
	var info store.Info
	if err == nil {
		info, err = store.Check(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
		return store.Info{}, err
	}
	return info, nil
}

// backupFromHub streams POST /api/backup of the hub at base into w.
func backupFromHub(base, token string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/backup", nil)
	if err != nil {
		return fmt.Errorf("cannot build request: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the hub at %s: is it running? (%w)", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var p struct{ Detail string }
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&p)
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			hint = " (pass an admin token with --token or LMOS_HUB_TOKEN)"
		}
		return fmt.Errorf("the hub refused the backup: %s: %s%s", resp.Status, p.Detail, hint)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("cannot receive the backup: %w", err)
	}
	return nil
}
