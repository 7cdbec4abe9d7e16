package web_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseStream is an open event stream of the adapter, read frame by frame.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
}

// sseFrame is one event block; raw is its text as sent.
type sseFrame struct {
	event, id, data, retry string
	raw                    string
}

// stream opens path as an event stream (Accept: text/event-stream, the
// admin token unless a header replaces it) and fails unless the answer is
// 200 text/event-stream. Reads are bounded so a missing frame fails the
// test instead of hanging it.
func (d *directory) stream(path string, header ...string) *sseStream {
	d.t.Helper()
	return d.streamWith(func(req *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
	}, path)
}

// streamWith is stream with the request changed by edit.
func (d *directory) streamWith(edit func(*http.Request), path string) *sseStream {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", d.url+path, nil)
	if err != nil {
		cancel()
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Accept", "text/event-stream")
	edit(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		d.t.Fatal(err)
	}
	s := &sseStream{t: d.t, resp: resp, rd: bufio.NewReader(resp.Body), cancel: cancel}
	d.t.Cleanup(s.close)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		d.t.Fatalf("%s %s: %d %s, want 200 text/event-stream", req.Method, path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
		d.t.Fatalf("GET %s: Cache-Control %q", path, cc)
	}
	return s
}

func ioNopCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next event block, skipping keep-alive lines.
func (s *sseStream) next() sseFrame {
	s.t.Helper()
	var f sseFrame
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			s.t.Fatalf("event stream: %v after %q", err, f.raw+line)
		}
		if line == "\n" {
			if f.raw == "" {
				continue // a keep-alive
			}
			f.raw += line
			return f
		}
		f.raw += line
		field, value, _ := strings.Cut(strings.TrimSuffix(line, "\n"), ": ")
		switch field {
		case "event":
			f.event = value
		case "id":
			f.id = value
		case "retry":
			f.retry = value
		case "data":
			if f.data != "" {
				f.data += "\n"
			}
			f.data += value
		}
	}
}
