//! One call of one handler ([`Hop`]): the request sent ([`Request`]), the
//! decoded answer ([`Response`]) and how long it took.

use std::time::Duration;

use megamind_core::{
    proto::n_alice::n_scenarios::{
        TError, TScenarioApplyRequest, TScenarioApplyResponse, TScenarioCommitResponse, TScenarioContinueResponse,
        TScenarioResponseBody, TScenarioRunRequest, TScenarioRunResponse, t_scenario_apply_response,
        t_scenario_commit_response, t_scenario_continue_response, t_scenario_run_response,
    },
    scenario::Handler,
};

/// A request for one handler; the variant names the handler, so a request
/// can never go to a handler that takes the other message.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// For `/run`.
    Run(TScenarioRunRequest),
    /// For `/continue`.
    Continue(TScenarioApplyRequest),
    /// For `/commit`.
    Commit(TScenarioApplyRequest),
    /// For `/apply`.
    Apply(TScenarioApplyRequest),
}

impl Request {
    /// The handler this request is for.
    pub fn handler(&self) -> Handler {
        match self {
            Request::Run(_) => Handler::Run,
            Request::Continue(_) => Handler::Continue,
            Request::Commit(_) => Handler::Commit,
            Request::Apply(_) => Handler::Apply,
        }
    }

    /// `BaseRequest.RequestId`, empty when the request has none.
    pub fn request_id(&self) -> &str {
        let base = match self {
            Request::Run(request) => request.base_request.as_ref(),
            Request::Continue(request) | Request::Commit(request) | Request::Apply(request) => {
                request.base_request.as_ref()
            }
        };
        base.map_or("", |base| base.request_id.as_str())
    }
}

/// A handler's decoded answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// `/run`'s answer.
    Run(TScenarioRunResponse),
    /// `/continue`'s answer.
    Continue(TScenarioContinueResponse),
    /// `/commit`'s answer.
    Commit(TScenarioCommitResponse),
    /// `/apply`'s answer.
    Apply(TScenarioApplyResponse),
}

impl Response {
    /// The `/run` answer, if this is one.
    pub fn as_run(&self) -> Option<&TScenarioRunResponse> {
        match self {
            Response::Run(answer) => Some(answer),
            _ => None,
        }
    }

    /// The answer for the user it carries: `ResponseBody`, or a `/run`'s
    /// `CommitCandidate.ResponseBody`.
    pub fn body(&self) -> Option<&TScenarioResponseBody> {
        use t_scenario_run_response::Response as Run;
        match self {
            Response::Run(answer) => match &answer.response {
                Some(Run::ResponseBody(body)) => Some(body),
                Some(Run::CommitCandidate(candidate)) => candidate.response_body.as_ref(),
                _ => None,
            },
            Response::Continue(answer) => match &answer.response {
                Some(t_scenario_continue_response::Response::ResponseBody(body)) => Some(body),
                _ => None,
            },
            Response::Apply(answer) => match &answer.response {
                Some(t_scenario_apply_response::Response::ResponseBody(body)) => Some(body),
                _ => None,
            },
            Response::Commit(_) => None,
        }
    }

    /// The protocol `Error` it carries.
    pub fn error(&self) -> Option<&TError> {
        match self {
            Response::Run(answer) => match &answer.response {
                Some(t_scenario_run_response::Response::Error(error)) => Some(error),
                _ => None,
            },
            Response::Continue(answer) => match &answer.response {
                Some(t_scenario_continue_response::Response::Error(error)) => Some(error),
                _ => None,
            },
            Response::Commit(answer) => match &answer.response {
                Some(t_scenario_commit_response::Response::Error(error)) => Some(error),
                _ => None,
            },
            Response::Apply(answer) => match &answer.response {
                Some(t_scenario_apply_response::Response::Error(error)) => Some(error),
                _ => None,
            },
        }
    }

    /// `Version`, which every answer carries.
    pub fn version(&self) -> &str {
        match self {
            Response::Run(answer) => &answer.version,
            Response::Continue(answer) => &answer.version,
            Response::Commit(answer) => &answer.version,
            Response::Apply(answer) => &answer.version,
        }
    }
}

/// One call: the request, how long from sending it to having the whole
/// answer, and the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Hop {
    /// The request as sent.
    pub request: Request,
    /// From sending the request to having read the whole answer (decoding
    /// not included over HTTP).
    pub took: Duration,
    /// The decoded answer.
    pub response: Response,
}

impl Hop {
    /// The handler called.
    pub fn handler(&self) -> Handler {
        self.request.handler()
    }

    /// `BaseRequest.RequestId` of the request.
    pub fn request_id(&self) -> &str {
        self.request.request_id()
    }
}
