-- POST the JSON body given in the environment variable SLUICE_CHECK_BODY to
-- SLUICE_CHECK_PATH (default /v1/check, sluice-limiter's; Limitador's is
-- /check_and_report); one static request, so wrk spends no Lua per request.
wrk.method = "POST"
wrk.path = os.getenv("SLUICE_CHECK_PATH") or "/v1/check"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("SLUICE_CHECK_BODY")
