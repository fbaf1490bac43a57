-- POST /v1/check with the JSON body given in the environment variable
-- SLUICE_CHECK_BODY; one static request, so wrk spends no Lua per request.
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("SLUICE_CHECK_BODY")
