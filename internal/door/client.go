package door

import (
	"context"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Ask is what a gRPC door's `floodgate check` client shares: it connects
// to addr in plain text, then asks count times, each within timeout,
// printing "#N answer" for each on stdout; ask sends one request on conn
// and describes the answer. An error ends it: said on stderr (under
// command, for a connection that cannot be made), and returned as the
// exit status 1.
func Ask(ctx context.Context, command, addr string, count int, timeout time.Duration, stdout, stderr io.Writer,
	ask func(ctx context.Context, conn *grpc.ClientConn) (string, error)) int {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(stderr, command+":", err)
		return 1
	}
	defer conn.Close()
	for i := 1; i <= count; i++ {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		answer, err := ask(cctx, conn)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "#%d error: %v\n", i, err)
			return 1
		}
		fmt.Fprintf(stdout, "#%d %s\n", i, answer)
	}
	return 0
}
