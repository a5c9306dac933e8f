package e2b_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
)

// TestExecLostTail: envd reports a command's normal exit but its stream
// lost the end of the output. Wait says TransportLost rather than exit 0
// with the output cut short.
func TestExecLostTail(t *testing.T) {
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)
	b := newBox(t, newProvider(t, srv, nil), providers.Spec{})
	var armed atomic.Bool
	srv.SetFault(func(r *http.Request, n int) e2btest.Fault {
		if strings.HasSuffix(r.URL.Path, "/Start") && armed.CompareAndSwap(true, false) {
			// The command's Start stream carries the wrapper's marker,
			// then nothing more of its output: the command writes only
			// once it reads stdin, which the test sends after Exec
			// returned on the marker.
			return e2btest.Fault{KeepData: 1}
		}
		return e2btest.Fault{}
	})
	armed.Store(true)
	stdin, w := io.Pipe()
	var out bytes.Buffer
	pr, err := b.Exec(ctx(t), providers.ExecRequest{
		Argv:  []string{"/bin/sh", "-c", `read -r x; echo "$x"`},
		Stdin: stdin, Stdout: &out,
	})
	require.NoError(t, err)
	_, err = w.Write([]byte("hello\n"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	code, err := pr.Wait()
	require.Truef(t, providers.IsCode(err, providers.TransportLost), "Wait = %d, %v (output %q); want TransportLost", code, err, out.String())
}
