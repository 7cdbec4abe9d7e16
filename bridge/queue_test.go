package bridge

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/autopaho/queue"
)

// The outbox keeps its order within one tick of the file system's clock
// (autopaho's file queue orders by modification time) and across a
// reopen, and a write a crash cut short is not taken for a message.
func TestQueueOrderAndReopen(t *testing.T) {
	dir := t.TempDir()
	q, err := openQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		if err := q.Enqueue(strings.NewReader(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	take := func(q *fileQueue, k int, from int) {
		t.Helper()
		for i := from; i < from+k; i++ {
			e, err := q.Peek()
			if err != nil {
				t.Fatal(err)
			}
			r, _ := e.Reader()
			b, _ := io.ReadAll(r)
			if string(b) != fmt.Sprint(i) {
				t.Fatalf("message %d is %q", i, b)
			}
			if err := e.Remove(); err != nil && !errors.Is(err, queue.ErrEmpty) {
				t.Fatal(err)
			}
		}
	}
	take(q, 100, 0)
	if err := os.WriteFile(filepath.Join(dir, "x.msg.tmp"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	q2, err := openQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	if q2.Len() != n-100 {
		t.Fatalf("reopened with %d messages, want %d", q2.Len(), n-100)
	}
	if err := q2.Enqueue(strings.NewReader(fmt.Sprint(n))); err != nil {
		t.Fatal(err)
	}
	take(q2, n-100+1, 100)
	if _, err := q2.Peek(); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Peek of an empty queue: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.msg.tmp")); !os.IsNotExist(err) {
		t.Errorf("the cut-short write is still there: %v", err)
	}
}
