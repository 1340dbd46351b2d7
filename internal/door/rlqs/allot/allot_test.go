package allot

import (
	"math"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestDemandIsReportedRequestsOverTheTimeSinceTheLastReport(t *testing.T) {
	if got := Demand(300, 200, 5*time.Second); got != 100 {
		t.Errorf("500 requests over 5 s: %v a second", got)
	}
	// A bucket's first report counts one request over no time
	// (GlobalRateLimitClientImpl::createBucketImpl): not known.
	if got := Demand(1, 0, 0); got != -1 {
		t.Errorf("the first report: %v, want -1 (not known)", got)
	}
}

func TestShare(t *testing.T) {
	for _, c := range []struct {
		name string
		in   Input
		want float64
	}{
		{"alone, asking more than the limit: the whole limit",
			Input{Limit: 100, Demand: 300}, 100},
		{"alone, asking less: still the whole limit, room to grow",
			Input{Limit: 100, Demand: 10}, 100},
		{"two on one replica, 150 and 50: the level, half",
			Input{Limit: 100, Demand: 150, Others: []float64{50}}, 50},
		{"one asking half of the fleet's demand, seven the rest: an eighth, as each of them",
			Input{Limit: 1000, Demand: 1000, Others: []float64{143, 143, 143}, Elsewhere: Fleet{Demand: 572, Envoys: 4}}, 125},
		{"one of those seven: an eighth too",
			Input{Limit: 1000, Demand: 143, Others: []float64{1000, 143, 143}, Elsewhere: Fleet{Demand: 572, Envoys: 4}}, 125},
		{"a quiet one below the level: what it asks",
			Input{Limit: 500, Demand: 20, Others: []float64{500, 500}}, 20},
		{"a loud one beside it: what the quiet one leaves, halved",
			Input{Limit: 500, Demand: 500, Others: []float64{20, 500}}, 240},
		{"beside an idle one: what its floor leaves, thirded",
			Input{Limit: 100, Demand: 100, Others: []float64{0, 100, 100}}, 32.5},
		{"elsewhere a throttled Envoy and a quiet one: the quiet one's 30 left to it, a third of the rest",
			Input{Limit: 1000, Demand: 600, Others: []float64{600}, Elsewhere: Fleet{Demand: 1030, Envoys: 2, ThrottledDemand: 1000, Throttled: 1}}, 970.0 / 3},
		{"the same not knowing which is throttled: as two asking 515 each, a quarter",
			Input{Limit: 1000, Demand: 600, Others: []float64{600}, Elsewhere: Fleet{Demand: 1030, Envoys: 2}}, 250},
		{"one elsewhere as busy: half",
			Input{Limit: 100, Demand: 100, Elsewhere: Fleet{Demand: 100, Envoys: 1}}, 50},
		{"under the limit, shares still add up to it: what it asks and a quarter of what is left",
			Input{Limit: 100, Demand: 30, Elsewhere: Fleet{Demand: 30, Envoys: 3}}, 40},
		{"a newcomer among two Envoys of 100 each: an average one's, a third",
			Input{Limit: 90, Demand: -1, Others: []float64{100, 100}}, 30},
		{"a newcomer beside a heavy Envoy and two light ones: an even share, not their average",
			Input{Limit: 1000, Demand: -1, Others: []float64{2000, 50, 50}}, 250},
		{"a newcomer alone: the whole limit",
			Input{Limit: 90, Demand: -1}, 90},
		{"an idle Envoy among three busy ones: the floor, a tenth of an even share",
			Input{Limit: 100, Demand: 0, Others: []float64{100, 100, 100}}, 2.5},
		{"nobody asks anything: an even share",
			Input{Limit: 100, Demand: 0, Others: []float64{0, 0, 0}}, 25},
		{"no limit: nothing", Input{Limit: 0, Demand: 5}, 0},
	} {
		if got := Share(c.in); !near(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSharesAddUpToTheLimit: whatever the demands, Envoys dividing with
// the same view of the fleet are assigned the limit between them, floors
// included, and fairly: an Envoy gets less than another only when it gets
// all it asks (or its floor).
func TestSharesAddUpToTheLimit(t *testing.T) {
	for _, demands := range [][]float64{{1000, 143, 143, 143, 143, 143, 143, 143}, {5, 5}, {1, 2, 3, 4}, {0.5, 1e6}, {0, 0, 1000}, {10, 400, 2000, 300}} {
		shares := make([]float64, len(demands))
		sum := 0.0
		for i, d := range demands {
			others := append(append([]float64{}, demands[:i]...), demands[i+1:]...)
			shares[i] = Share(Input{Limit: 1000, Demand: d, Others: others})
			sum += shares[i]
		}
		if math.Abs(sum-1000) > 1e-6 {
			t.Errorf("demands %v: shares %v add up to %v", demands, shares, sum)
		}
		floor := 1000 / float64(len(demands)) * FloorFraction
		for i := range demands {
			for j := range demands {
				if shares[i] < shares[j]-1e-9 && shares[i] < math.Max(demands[i], floor)-1e-9 {
					t.Errorf("demands %v: shares %v: %d gets less than %d and less than it asks", demands, shares, i, j)
				}
			}
		}
	}
}

// TestEnvoysElsewhereAreDividedForAsAnEvenGroup: a replica that knows the
// other replicas' Envoys only by their number and demand added up gives
// its own Envoys what a replica knowing each would, when the others ask
// about the same each; when they do not, it gives less (never more).
func TestEnvoysElsewhereAreDividedForAsAnEvenGroup(t *testing.T) {
	exact := Share(Input{Limit: 1000, Demand: 143, Others: []float64{1000, 143, 143, 143, 143, 143, 143}})
	grouped := Share(Input{Limit: 1000, Demand: 143, Others: []float64{1000, 143, 143}, Elsewhere: Fleet{Demand: 572, Envoys: 4}})
	if !near(grouped, exact) || !near(exact, 125) {
		t.Errorf("even elsewhere: %v, knowing each %v, want 125", grouped, exact)
	}
	// Elsewhere one Envoy asks 1,000 and one 10: each known, the level is
	// 483 (the 10 counted as its floor, 33); as a group of two asking 505
	// each, 333.
	exact = Share(Input{Limit: 1000, Demand: 500, Others: []float64{1000, 10}})
	grouped = Share(Input{Limit: 1000, Demand: 500, Elsewhere: Fleet{Demand: 1010, Envoys: 2}})
	if !near(exact, (1000-100.0/3)/2) || !(grouped < exact) || !near(grouped, 1000.0/3) {
		t.Errorf("uneven elsewhere: %v, knowing each %v", grouped, exact)
	}
}

func TestBucket(t *testing.T) {
	for _, c := range []struct {
		share, burst float64
		want         TokenBucket
	}{
		{100, 0.2, TokenBucket{MaxTokens: 20, TokensPerFill: 100, FillSeconds: 1}},
		// 1.5 a second is 3 every 2 s, not 2 every second.
		{1.5, 1, TokenBucket{MaxTokens: 2, TokensPerFill: 3, FillSeconds: 2}},
		// Under one a second: one token every 1/share seconds.
		{0.25, 0.2, TokenBucket{MaxTokens: 1, TokensPerFill: 1, FillSeconds: 4}},
		{0.0001, 1, TokenBucket{MaxTokens: 1, TokensPerFill: 1, FillSeconds: MaxFillSeconds}},
		{142.857, 0.2, TokenBucket{MaxTokens: 29, TokensPerFill: 143, FillSeconds: 1}},
	} {
		got := Bucket(c.share, c.burst, TokenBucket{}, Hysteresis)
		if got != c.want {
			t.Errorf("share %v: %+v, want %+v", c.share, got, c.want)
		}
		if got.FillSeconds < 1 || got.TokensPerFill < 1 {
			t.Errorf("share %v: %+v: Envoy divides by the interval's whole seconds", c.share, got)
		}
		if r := got.Rate(); math.Abs(r-c.share) > 0.01*c.share+1.0/MaxFillSeconds {
			t.Errorf("share %v: refills %v a second", c.share, r)
		}
	}
}

// TestABucketIsKeptWhileTheShareMovesLittle: Envoy keeps its bucket, tokens
// and all, while the assignment is the same (shouldReplaceTokenBucket), a
// new one starting full: within Hysteresis the previous one is sent again.
func TestABucketIsKeptWhileTheShareMovesLittle(t *testing.T) {
	prev := Bucket(100, 0.2, TokenBucket{}, Hysteresis)
	if got := Bucket(104, 0.2, prev, Hysteresis); got != prev {
		t.Errorf("a share 4%% higher: %+v, want the previous %+v", got, prev)
	}
	if got := Bucket(110, 0.2, prev, Hysteresis); got == prev || got.TokensPerFill != 110 {
		t.Errorf("a share 10%% higher: %+v", got)
	}
}

// TestAnIntervalChangeAloneChangesMaxTokensToo: Envoy compares
// max_tokens, tokens_per_fill and fill_interval's nanos alone
// (protoTokenBucketsEq, global_client_impl.cc), so a new assignment that
// differs only in its interval's seconds would keep the old bucket and its
// old rate; Bucket then gives it one more max token.
func TestAnIntervalChangeAloneChangesMaxTokensToo(t *testing.T) {
	prev := TokenBucket{MaxTokens: 1, TokensPerFill: 1, FillSeconds: 4} // 0.25 a second
	got := Bucket(0.5, 0.2, prev, Hysteresis)                           // 1 every 2 s
	if got.FillSeconds != 2 || got.TokensPerFill != 1 {
		t.Fatalf("%+v", got)
	}
	if got.MaxTokens == prev.MaxTokens {
		t.Errorf("%+v: the same max_tokens and tokens_per_fill as %+v, which Envoy would take for the same bucket", got, prev)
	}
}

// report is one report's counts, as Recent and Rose read them: the
// Envoy's demand at its previous report, what it allowed and denied, and
// what its token buckets gave it over the 5 s interval.
type report struct {
	name            string
	prev            float64
	allowed, denied uint64
	given           float64
}

// TestRecentFindsWhereDemandFell: an Envoy asking 1,000 a second under a
// share of 500 for 3.9 s of a 5 s interval, then 142 a second: its report
// mixes the two (811 a second), and Recent recovers the 142 from the
// counts; reports that do not show a fall give their demand over the
// interval.
func TestRecentFindsWhereDemandFell(t *testing.T) {
	share, t1, t2 := 500.0, 3.9, 1.1
	allowed := uint64(share*t1 + 142*t2)
	denied := uint64((1000 - share) * t1)
	given := share * (t1 + t2)
	if got := Recent(1000, allowed, denied, 5*time.Second, given); math.Abs(got-142) > 2 {
		t.Errorf("the fall: %.1f a second, want 142", got)
	}
	for _, c := range []report{
		{"saturated throughout", 1000, 2500, 2500, 2500},
		{"below its share throughout", 200, 1000, 0, 2500},
		{"a first report", -1, allowed, denied, given},
		{"demand that rose", 100, allowed, denied, given},
		{"an interval under ALLOW_ALL", 1000, allowed, denied, math.NaN()},
		// Saturated throughout, but given more than it could use: buckets
		// pushed one after another in an instant, each counted full.
		// Taken as a fall, the counts would put it at 0 a second.
		{"saturated, tokens given it never held", 1016.7, 625, 4375, 691},
		// Saturated throughout, its previous demand read too high (a short
		// interval): the counts show a shallow fall, to 321 under a share
		// of 379, no lower than FallDepth of it.
		{"saturated, its previous demand overestimated", 1763, 1766, 3859, 1894},
	} {
		if got, want := Recent(c.prev, c.allowed, c.denied, 5*time.Second, c.given), Demand(c.allowed, c.denied, 5*time.Second); got != want {
			t.Errorf("%s: %.1f, want its demand over the interval %.1f", c.name, got, want)
		}
	}
}

// TestRoseSeesDemandCrossTheShareUpwards: an Envoy that asked 54 a second
// under a share of 81 and then 1,125 reports 291 a second over the
// interval, with denials: a rise. Below its share with a few requests of a
// burst denied, saturated before, or new, it did not rise.
func TestRoseSeesDemandCrossTheShareUpwards(t *testing.T) {
	if !Rose(54, 272, 1185, 5*time.Second, 407) {
		t.Error("54 a second at its last report, 291 now with denials, under a share of 81: not read as a rise")
	}
	for _, c := range []report{
		{"below its share, a few denied", 54, 270, 3, 625},
		{"saturated before", 600, 2500, 3000, 2500},
		{"a first report", -1, 272, 1185, 407},
		{"no denial", 54, 400, 0, 407},
		{"an interval under ALLOW_ALL", 54, 272, 1185, math.NaN()},
	} {
		if Rose(c.prev, c.allowed, c.denied, 5*time.Second, c.given) {
			t.Errorf("%s: read as a rise", c.name)
		}
	}
}

func TestLeftoverIsWhatTheOthersLeave(t *testing.T) {
	in := Input{Limit: 1000, Demand: 291, Others: []float64{54, 54, 54}, Elsewhere: Fleet{Demand: 216, Envoys: 4}}
	if got := Leftover(in); !near(got, 622) {
		t.Errorf("three of 54 and four elsewhere asking 216 of 1000: %v left, want 622", got)
	}
	in.Others = append(in.Others, 900)
	if got := Leftover(in); got != 0 {
		t.Errorf("others asking more than the limit: %v left, want 0", got)
	}
}

// TestSharesAreEachEnvoysShare: Shares divides for every Envoy at once as
// Share does for each, the others being the rest.
func TestSharesAreEachEnvoysShare(t *testing.T) {
	for _, elsewhere := range []Fleet{{Demand: 900, Envoys: 3}, {Demand: 900, Envoys: 3, ThrottledDemand: 800, Throttled: 1}} {
		for _, demands := range [][]float64{{1000, 143, 143}, {5, 5}, {1, 2, 3, 4}, {0, 0, 1000}, {10, 400, 2000, 300}, {7}} {
			got := Shares(1000, demands, elsewhere)
			for i, d := range demands {
				others := append(append([]float64{}, demands[:i]...), demands[i+1:]...)
				if want := Share(Input{Limit: 1000, Demand: d, Others: others, Elsewhere: elsewhere}); !near(got[i], want) {
					t.Errorf("demands %v beside %+v: Envoy %d's share %v, Share says %v", demands, elsewhere, i, got[i], want)
				}
			}
		}
	}
}
