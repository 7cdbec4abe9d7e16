package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// snapshotOf is a backup of a store holding the Things ids.
func snapshotOf(t *testing.T, ids ...string) []byte {
	t.Helper()
	db := openT(t, t.TempDir(), Options{})
	b := &hub.Batch{}
	for i, id := range ids {
		b.Puts = append(b.Puts, rec(id))
		b.Events = append(b.Events, ev(uint64(i+1), hub.EventCreated, id))
	}
	commit(t, db, b)
	var buf bytes.Buffer
	if _, err := db.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// storeIn puts a store holding ids into dir and returns its bytes.
func storeIn(t *testing.T, dir string, ids ...string) []byte {
	t.Helper()
	b := snapshotOf(t, ids...)
	if err := os.WriteFile(filepath.Join(dir, FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// filesIn lists dir's entries.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestRestoreReplacesAndKeepsOld(t *testing.T) {
	dir := t.TempDir()
	old := storeIn(t, dir, "urn:old")
	info, kept, err := Restore(dir, bytes.NewReader(snapshotOf(t, "urn:a", "urn:b")), 0)
	if err != nil || info.Things != 2 || info.HubID == "" {
		t.Fatalf("Restore = %+v, %v", info, err)
	}
	if b, err := os.ReadFile(kept); err != nil || !bytes.Equal(b, old) {
		t.Errorf("the old store is not kept at %q: %v", kept, err)
	}
	db := openT(t, dir, Options{})
	if got := loadAll(t, db); len(got) != 2 || got[0].ID != "urn:a" {
		t.Errorf("restored things = %+v", got)
	}
}

func TestRestoreRefusesGarbageAndChangesNothing(t *testing.T) {
	for name, junk := range map[string][]byte{
		"text":  []byte("this is not a database\n"),
		"empty": nil,
		"zeros": make([]byte, 64<<10),
		"cut":   snapshotOf(t, "urn:a")[:8192],
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			old := storeIn(t, dir, "urn:old")
			_, kept, err := Restore(dir, bytes.NewReader(junk), 0)
			if !errors.Is(err, ErrNotStore) || kept != "" || !strings.Contains(err.Error(), "not a valid lmos-hub store") {
				t.Fatalf("Restore(garbage) = %q, %v; want ErrNotStore", kept, err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, FileName)); !bytes.Equal(b, old) {
				t.Error("the store changed")
			}
			if got := filesIn(t, dir); len(got) != 1 || got[0] != FileName {
				t.Errorf("the data directory holds %v, want only %s", got, FileName)
			}
		})
	}
}

func TestRestoreRefusesWhileOpen(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	before, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Restore(dir, bytes.NewReader(snapshotOf(t, "urn:a")), 100*time.Millisecond)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Restore while open = %v, want ErrLocked", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, FileName)); !bytes.Equal(b, before) {
		t.Error("the store changed")
	}
	if got := filesIn(t, dir); len(got) != 1 {
		t.Errorf("the data directory holds %v", got)
	}
	if got := loadAll(t, db); len(got) != 0 {
		t.Errorf("the open store holds %+v", got)
	}
	if _, err := BackupDir(dir, &bytes.Buffer{}, 100*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Errorf("BackupDir while open = %v, want ErrLocked", err)
	}
}

func TestBackupDirOfStoppedStore(t *testing.T) {
	dir := t.TempDir()
	storeIn(t, dir, "urn:a")
	var buf bytes.Buffer
	if _, err := BackupDir(dir, &buf, 0); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "b.db")
	if err := os.WriteFile(f, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if info, err := Check(f); err != nil || info.Things != 1 {
		t.Errorf("Check(backup) = %+v, %v", info, err)
	}
	if _, err := BackupDir(t.TempDir(), &buf, 0); !errors.Is(err, ErrNoStore) {
		t.Errorf("BackupDir(empty dir) = %v, want ErrNoStore", err)
	}
}
