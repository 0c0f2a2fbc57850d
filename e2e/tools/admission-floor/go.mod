module github.com/kai-py/kai-scheduler/e2e/tools/admission-floor

go 1.26.0
