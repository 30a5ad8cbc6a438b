import './base.css';
import './jobs.css';
import './pipeline.css';
