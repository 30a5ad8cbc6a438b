/**
 * Types of the feedback area: one vote, correction or comment on a chat answer (`FeedbackRecord`)
 * and the table of a feedback log (`GET feedback/table`).
 */

/** `FeedbackRecord.to_json()`. */
export interface IFeedbackRecord {
  id: string;
  at: number;
  user: string;
  model: string;
  prompt: string;
  answer: string;
  answer_id: string;
  vote: 'up' | 'down' | null;
  better: string | null;
  comment: string | null;
  session: string | null;
}

/** `GET feedback/table?ref=LOG`: `FeedbackTable.to_json()`. */
export interface IFeedbackTable {
  ref: string;
  records: IFeedbackRecord[];
  total: number;
  pairs: number;
  labels: number;
}
