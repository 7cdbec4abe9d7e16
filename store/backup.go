package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrNotStore is matched (errors.Is) by the error Check and Restore return
// for a file that is not a hub store this version can open.
var ErrNotStore = errors.New("not a valid lmos-hub store")

// ErrNoStore is matched by the error BackupDir returns for a data
// directory that holds no store.
var ErrNoStore = errors.New("no lmos-hub store in the data directory")

// Info describes a store file that passed Check.
type Info struct {
	HubID  string
	Schema uint64
	Things int
}

// notStore wraps why a file is not a store; it matches ErrNotStore.
type notStore struct {
	path string
	why  error
}

func (e *notStore) Error() string {
	return fmt.Sprintf("%s is not a valid lmos-hub store: %v", e.path, e.why)
}

func (e *notStore) Unwrap() []error { return []error{ErrNotStore, e.why} }

// Check opens the store file at path read-only and checks that bbolt can
// read every page of it (tx.Check), that it has the hub's meta bucket, a
// hub id and a schema version this lmos-hub can open. It writes nothing.
func Check(path string) (Info, error) {
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: DefaultLockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return Info{}, &lockedError{dir: filepath.Dir(path), timeout: DefaultLockTimeout, err: err}
	}
	if err != nil {
		return Info{}, &notStore{path: path, why: err}
	}
	defer bdb.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return Info{}, fmt.Errorf("cannot check %s: %w", path, err)
	}
	var info Info
	err = bdb.View(func(tx *bolt.Tx) error {
		// Before any page is read: a page past the end of a cut file
		// faults (SIGBUS) when read through the map.
		if tx.Size() > fi.Size() {
			return fmt.Errorf("it is cut short: %d bytes of %d", fi.Size(), tx.Size())
		}
		var bad error
		for err := range tx.Check() { // drained: its goroutine sends them all
			bad = cmp.Or(bad, err)
		}
		if bad != nil {
			return fmt.Errorf("inconsistent database: %w", bad)
		}
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return errors.New("it has no meta bucket")
		}
		v := meta.Get(keySchema)
		if len(v) != 8 {
			return errors.New("it has no schema version")
		}
		info.Schema = binary.BigEndian.Uint64(v)
		if info.Schema > SchemaVersion {
			return fmt.Errorf("its schema version %d is newer than this lmos-hub supports (%d)", info.Schema, SchemaVersion)
		}
		if info.HubID = string(meta.Get(keyHubID)); info.HubID == "" {
			return errors.New("it has no hub id")
		}
		if b := tx.Bucket(bucketThingMeta); b != nil {
			info.Things = b.Stats().KeyN
		}
		return nil
	})
	if err != nil {
		return Info{}, &notStore{path: path, why: err}
	}
	return info, nil
}

// BackupDir writes a consistent snapshot of the store in dir, which no
// hub may be running on (ErrLocked after lockTimeout, 0: the default).
// It opens the store read-only and changes nothing.
func BackupDir(dir string, w io.Writer, lockTimeout time.Duration) (int64, error) {
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("cannot back up %q: %w (%w)", dir, ErrNoStore, err)
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return 0, &lockedError{dir: dir, timeout: lockTimeout, err: err}
	}
	if err != nil {
		return 0, fmt.Errorf("cannot open the store in %q: %w", dir, err)
	}
	defer bdb.Close()
	s := &DB{db: bdb, path: path}
	return s.Backup(w)
}

// Restore replaces the store in dir with the snapshot read from src. It
// copies src beside the store, checks the copy (Check: ErrNotStore), takes
// the store's file lock (ErrLocked while a hub runs on dir) and only then
// renames the copy over the store, keeping the old one as
// hub.db.pre-restore-TIMESTAMP (returned; "" when dir held none). On any
// error the store in dir is as it was.
func Restore(dir string, src io.Reader, lockTimeout time.Duration) (info Info, kept string, err error) {
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Info{}, "", fmt.Errorf("cannot create data directory: %w", err)
	}
	tmp, err := copyBeside(dir, src)
	if err != nil {
		return Info{}, "", err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if info, err = Check(tmp); err != nil {
		return Info{}, "", err
	}
	path := filepath.Join(dir, FileName)
	unlock, err := lockFile(path, lockTimeout)
	if errors.Is(err, berrors.ErrTimeout) {
		return Info{}, "", &lockedError{dir: dir, timeout: lockTimeout, err: err}
	}
	if err != nil {
		return Info{}, "", err
	}
	defer unlock()
	if _, serr := os.Stat(path); serr == nil {
		// A hard link keeps the old store without a moment when dir has
		// none: a hub starting meanwhile would create an empty one.
		kept = path + ".pre-restore-" + time.Now().UTC().Format("20060102T150405Z")
		if err = os.Link(path, kept); err != nil {
			return Info{}, "", fmt.Errorf("cannot keep the old store: %w", err)
		}
	}
	if err = os.Rename(tmp, path); err != nil {
		if kept != "" {
			os.Remove(kept)
		}
		return Info{}, "", fmt.Errorf("cannot put the restored store in place: %w", err)
	}
	return info, kept, syncDir(dir)
}

// copyBeside copies src into a new file in dir and syncs it.
func copyBeside(dir string, src io.Reader) (string, error) {
	f, err := os.CreateTemp(dir, FileName+".restore-*")
	if err != nil {
		return "", fmt.Errorf("cannot create the restore file: %w", err)
	}
	_, err = io.Copy(f, src)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("cannot copy the backup into %q: %w", dir, err)
	}
	return f.Name(), nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot sync the data directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cannot sync the data directory: %w", err)
	}
	return nil
}
