package fielderr

// Plural is one or many as n counts: the messages of every problem count
// ("1 problem", "3 problems") say it alike.
func Plural[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
