package testenv

import "github.com/courier-go/courier/internal/testwait"

// Buffer is a bytes.Buffer that a process (exec.Cmd's Stdout or Stderr)
// writes to while the test reads it (testwait.Buffer).
type Buffer = testwait.Buffer
