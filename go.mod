module agentsociety

go 1.26
