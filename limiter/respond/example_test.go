package respond_test

import (
	"fmt"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/respond"
)

// What a denial tells the client, from the denied bucket's result: the
// structured RateLimit fields, Retry-After, and the JSON body.
func ExampleAppendBody() {
	l := limiter.MustLimit(5, "1")
	r := l.Result(l.CapacityUnits(), limiter.Take, 1, false) // an empty bucket asked for 1 token
	fmt.Println(respond.HeaderPolicy+":", string(respond.AppendPolicy(nil, "api", l.Capacity, respond.Window(l))))
	fmt.Println(respond.HeaderRateLimit+":", string(respond.AppendRateLimit(nil, "api", r.Remaining, respond.Seconds(r.ResetAfter))))
	retry := respond.RetryAfter(r.RetryAfter)
	fmt.Println(respond.HeaderRetryAfter+":", retry)
	fmt.Println(string(respond.AppendBody(nil, respond.Body{Limit: "api", RetryAfter: retry})))
	// Output:
	// ratelimit-policy: "api";q=5;w=5
	// ratelimit: "api";r=0;t=5
	// retry-after: 1
	// {"error":"rate_limited","policy":"api","retry_after":1}
}
