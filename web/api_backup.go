package web

import (
	"io"
	"net/http"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// backup is POST /api/backup (admin token): a consistent snapshot of the
// whole store, streamed as it is read (a bbolt file, itself a valid
// hub.db; `lmos-hub restore` puts it in place). The store stays in use
// meanwhile: the snapshot is one read transaction.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Backup == nil {
		s.writeError(w, r, hub.Errorf(hub.EUNAVAILABLE, "this hub has no store to back up"))
		return
	}
	name := "lmos-hub-" + s.cfg.Now().UTC().Format("20060102T150405Z") + ".db"
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Cache-Control", "no-store")
	n, err := s.cfg.Backup(&deadlineWriter{w: w, rc: http.NewResponseController(w), d: s.cfg.WriteTimeout})
	if err != nil {
		s.log.Error("backup failed", "err", err, "bytes", n)
		if n == 0 {
			s.writeError(w, r, err)
			return
		}
		// The client must not take a cut stream for a whole backup: end
		// the response without its last chunk.
		panic(http.ErrAbortHandler)
	}
	s.log.Info("backup streamed", "bytes", n, "client", clientAddr(r))
}

// deadlineWriter gives every write the write timeout anew: a large store
// may take longer than one timeout to send, but a client that stops
// reading must not hold the snapshot's read transaction (which keeps the
// store from growing its map) for long.
type deadlineWriter struct {
	w  io.Writer
	rc *http.ResponseController
	d  time.Duration
}

func (dw *deadlineWriter) Write(p []byte) (int, error) {
	_ = dw.rc.SetWriteDeadline(time.Now().Add(dw.d))
	return dw.w.Write(p)
}
