package cluster

// Rank is rank, for the placement test.
var Rank = rank
