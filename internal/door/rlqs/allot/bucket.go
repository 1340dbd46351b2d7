package allot

import "math"

// TokenBucket is an assignment as Envoy enforces it
// (envoy.type.v3.TokenBucket): MaxTokens, refilled TokensPerFill every
// FillSeconds. Envoy reads it as a continuous refill of TokensPerFill /
// FillSeconds tokens a second, the interval truncated to whole seconds
// (createTokenBucketFromAction, global_client_impl.cc), so an interval
// under a second divides by zero: FillSeconds is always whole, at least 1.
type TokenBucket struct {
	MaxTokens     uint32
	TokensPerFill uint32
	FillSeconds   int64
}

// Rate is the bucket's refill, tokens a second (0 for the zero bucket).
func (b TokenBucket) Rate() float64 {
	if b.FillSeconds <= 0 {
		return 0
	}
	return float64(b.TokensPerFill) / float64(b.FillSeconds)
}

// MaxFillSeconds is the longest fill interval Bucket chooses: a share
// below one token a MaxFillSeconds is assigned one.
const MaxFillSeconds = 3600

// exactFills is how far Bucket looks for a fill interval whose whole tokens
// give the share closely: within 1% of it, or 1/(2·60) of a token a second.
const exactFills = 60

// Hysteresis is how far a share may move before its bucket is assigned
// anew at a report: Envoy keeps a bucket, its tokens included, only while the
// assignment is the same (shouldReplaceTokenBucket); a new one starts full,
// so every change gives the Envoy its burst again.
const Hysteresis = 0.05

// Bucket is the token bucket of a share (requests a second) with room for
// burst seconds of it at once (at least one token), or prev when the share
// is within tolerance (a fraction: Hysteresis at a report) of what prev
// refills, so that Envoy keeps its bucket.
//
// Envoy compares a new assignment with the one it holds by max_tokens,
// tokens_per_fill and fill_interval's nanos alone (protoTokenBucketsEq,
// global_client_impl.cc): a new interval with the same whole seconds'
// nanos (always 0 here) and the same tokens would be taken as unchanged,
// its old rate kept. So a bucket that differs from prev only in its
// interval has one more max token.
func Bucket(share, burst float64, prev TokenBucket, tolerance float64) TokenBucket {
	if prev.FillSeconds > 0 && share > 0 && math.Abs(prev.Rate()-share) <= tolerance*share {
		return prev
	}
	b := fill(share)
	b.MaxTokens = uint32(math.Min(math.Max(math.Round(share*burst), 1), math.MaxUint32))
	if b.MaxTokens == prev.MaxTokens && b.TokensPerFill == prev.TokensPerFill && b.FillSeconds != prev.FillSeconds {
		b.MaxTokens++
	}
	return b
}

// fill is the tokens and whole-second interval that refill share tokens a
// second most closely, preferring the shortest interval within 1%.
func fill(share float64) TokenBucket {
	if share <= 0 {
		return TokenBucket{TokensPerFill: 1, FillSeconds: MaxFillSeconds}
	}
	if share < 1 {
		s := int64(math.Min(math.Round(1/share), MaxFillSeconds))
		best := TokenBucket{TokensPerFill: 1, FillSeconds: s}
		// A share just under a whole number of tokens a minute is better
		// given as several tokens over a longer interval.
		for secs := int64(1); secs <= exactFills; secs++ {
			t := math.Round(share * float64(secs))
			if t < 1 {
				continue
			}
			c := TokenBucket{TokensPerFill: uint32(t), FillSeconds: secs}
			if math.Abs(c.Rate()-share) < math.Abs(best.Rate()-share) {
				best = c
			}
			if math.Abs(best.Rate()-share) <= 0.01*share {
				break
			}
		}
		return best
	}
	best := TokenBucket{}
	for secs := int64(1); secs <= exactFills; secs++ {
		t := math.Min(math.Round(share*float64(secs)), math.MaxUint32)
		c := TokenBucket{TokensPerFill: uint32(t), FillSeconds: secs}
		if best.FillSeconds == 0 || math.Abs(c.Rate()-share) < math.Abs(best.Rate()-share) {
			best = c
		}
		if math.Abs(best.Rate()-share) <= 0.01*share {
			break
		}
	}
	return best
}
